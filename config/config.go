// Package config reads the server owner's layered configuration of chat
// sessions: a server-wide layer and one layer per person, each a folder
// under the configuration directory, outside every vault. A layer holds
// extra MCP servers, skills, an extra system-prompt section, tool changes,
// the default model, the limits, whether publishing asks first and the
// notification settings; the person's layer overrides the server's
// (Person).
//
// It only reads: it never writes a file, and it never reads anything the
// agent can write. The configuration directory must not be inside the
// vault repository, and a file that is, or resolves through a symbolic
// link to, something under the vault root is refused; so is an MCP
// server's command line that names a file the agent can write
// (checkMCPArg). It does not decide what a setting means for a session
// (package assembly does) and it does not parse flags (cmd/major does).
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"unicode"
)

// The files of a layer, relative to its folder.
const (
	SettingsFile = "config.json"
	MCPFile      = "mcp.json"
	PromptFile   = "prompt.md"
	SkillsDir    = "skills"
	SkillFile    = "SKILL.md"
)

// Publishing values: whether the LinkedIn publishing tools ask first.
const (
	PublishAsk  = "ask"
	PublishAuto = "auto"
)

// Limits are the spending and turn limits of a layer; nil is "not set
// here".
type Limits struct {
	// SessionUSD is the most one session may spend.
	SessionUSD *float64 `json:"session_usd,omitempty"`
	// PersonDayUSD is the most one person's sessions may spend in a day.
	PersonDayUSD *float64 `json:"person_day_usd,omitempty"`
	// MaxTurns is the most agent turns one message may take.
	MaxTurns *int `json:"max_turns,omitempty"`
}

// Tools changes the session's tool set; nil is "not set here".
type Tools struct {
	// Disable takes tools out of the default set.
	Disable []string `json:"disable,omitempty"`
	// Add puts more built-in tools into the set; they run without asking.
	Add []string `json:"add,omitempty"`
	// Allow lets tools of the configured MCP servers run without asking:
	// mcp__<server> (all its tools) or mcp__<server>__<tool>.
	Allow []string `json:"allow,omitempty"`
}

// Skill is one skill: its folder's name and its SKILL.md.
type Skill struct {
	Name    string
	Content []byte
}

// Layer is one folder's configuration, as read.
type Layer struct {
	Model      string
	Prompt     string
	Publishing string
	Limits     Limits
	Tools      Tools
	// Notifications is the notifications key as written (checked by
	// Rules.Notifications), nil when not set.
	Notifications json.RawMessage
	// MCPServers are the entries of mcp.json's mcpServers, as written.
	MCPServers map[string]json.RawMessage
	Skills     []Skill
}

// Person is the configuration of one person's new sessions: their layer
// over the server's. Unset values are zero (nil for the lists and limits).
type Person struct {
	// Model is the default model; "" leaves it to the server's default.
	Model string
	// Prompt is the extra system-prompt section: the server's section,
	// then the person's, separated by a blank line.
	Prompt string
	// Publishing is PublishAsk, PublishAuto or "" (the server's flag).
	Publishing string
	Limits     Limits
	Tools      Tools
	// Notifications are the person's notification settings: their
	// layer's, else the server's (nil: none set).
	Notifications json.RawMessage
	// MCPServers are both layers' servers; the person's wins a name both
	// use.
	MCPServers map[string]json.RawMessage
	// Skills are both layers' skills sorted by name; the person's wins a
	// name both use.
	Skills []Skill
}

// Merge is person's layer over server's: each setting the person's layer
// sets replaces the server's (each of the limits and each of the tool
// lists on its own), MCP servers and skills are joined by name, and the
// prompt sections are both kept.
func Merge(server, person Layer) Person {
	p := Person{Model: server.Model, Publishing: server.Publishing, Limits: server.Limits, Tools: server.Tools,
		Notifications: server.Notifications}
	if person.Notifications != nil {
		p.Notifications = person.Notifications
	}
	if person.Model != "" {
		p.Model = person.Model
	}
	if person.Publishing != "" {
		p.Publishing = person.Publishing
	}
	if person.Limits.SessionUSD != nil {
		p.Limits.SessionUSD = person.Limits.SessionUSD
	}
	if person.Limits.PersonDayUSD != nil {
		p.Limits.PersonDayUSD = person.Limits.PersonDayUSD
	}
	if person.Limits.MaxTurns != nil {
		p.Limits.MaxTurns = person.Limits.MaxTurns
	}
	if person.Tools.Disable != nil {
		p.Tools.Disable = person.Tools.Disable
	}
	if person.Tools.Add != nil {
		p.Tools.Add = person.Tools.Add
	}
	if person.Tools.Allow != nil {
		p.Tools.Allow = person.Tools.Allow
	}
	var sections []string
	for _, s := range []string{server.Prompt, person.Prompt} {
		if s = strings.TrimSpace(s); s != "" {
			sections = append(sections, s)
		}
	}
	p.Prompt = strings.Join(sections, "\n\n")
	if len(server.MCPServers)+len(person.MCPServers) > 0 {
		p.MCPServers = map[string]json.RawMessage{}
		for _, l := range []Layer{server, person} {
			for name, raw := range l.MCPServers {
				p.MCPServers[name] = raw
			}
		}
	}
	skills := map[string]Skill{}
	for _, l := range []Layer{server, person} {
		for _, s := range l.Skills {
			skills[s.Name] = s
		}
	}
	for _, s := range skills {
		p.Skills = append(p.Skills, s)
	}
	sort.Slice(p.Skills, func(i, j int) bool { return p.Skills[i].Name < p.Skills[j].Name })
	return p
}

// Rules are what a layer's values are checked against; cmd/major takes
// them from the session assembly.
type Rules struct {
	// Disableable are the tools Tools.Disable may name.
	Disableable []string
	// Addable are the built-in tools Tools.Add may name.
	Addable []string
	// ReservedMCP are MCP server names the server uses itself.
	ReservedMCP []string
	// MCPWorkDir is the working directory the configured stdio MCP
	// servers run in, an absolute path outside the vault: a plain word in
	// their command line names a file there.
	MCPWorkDir string
	// Notifications checks the notifications key (what its settings mean
	// is package notify's); nil refuses the key.
	Notifications func(raw []byte) error
}

// settings is config.json.
type settings struct {
	Model         string          `json:"model"`
	Publishing    string          `json:"publishing"`
	Limits        Limits          `json:"limits"`
	Tools         Tools           `json:"tools"`
	Notifications json.RawMessage `json:"notifications"`
}

var (
	modelPattern   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@/\[\]-]{0,127}$`)
	toolPattern    = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]{0,63}$`)
	mcpNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)
	skillPattern   = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)
)

// decodeStrict decodes one JSON value into v, refusing unknown keys and
// anything after the value.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("not valid JSON for this file: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("more than one JSON value")
	}
	return nil
}

// parseSettings reads config.json into l.
func parseSettings(data []byte, r Rules, l *Layer) error {
	var s settings
	if err := decodeStrict(data, &s); err != nil {
		return err
	}
	if s.Model != "" && !modelPattern.MatchString(s.Model) {
		return fmt.Errorf("model %q is not a model name", s.Model)
	}
	switch s.Publishing {
	case "", PublishAsk, PublishAuto:
	default:
		return fmt.Errorf("publishing %q: must be %q or %q", s.Publishing, PublishAsk, PublishAuto)
	}
	for name, v := range map[string]*float64{"session_usd": s.Limits.SessionUSD, "person_day_usd": s.Limits.PersonDayUSD} {
		if v != nil && *v < 0 {
			return fmt.Errorf("limits.%s must be 0 (no limit) or more", name)
		}
	}
	if s.Limits.MaxTurns != nil && *s.Limits.MaxTurns < 0 {
		return errors.New("limits.max_turns must be 0 (no limit) or more")
	}
	for _, t := range s.Tools.Disable {
		if !slices.Contains(r.Disableable, t) {
			return fmt.Errorf("tools.disable: %q is not one of the session's tools (%s)", t, strings.Join(r.Disableable, ", "))
		}
	}
	for _, t := range s.Tools.Add {
		if !slices.Contains(r.Addable, t) {
			return fmt.Errorf("tools.add: %q cannot be added (these can: %s)", t, strings.Join(r.Addable, ", "))
		}
	}
	for _, t := range s.Tools.Allow {
		server, tool, _ := strings.Cut(strings.TrimPrefix(t, "mcp__"), "__")
		if !strings.HasPrefix(t, "mcp__") || !mcpNamePattern.MatchString(server) || (tool != "" && !toolPattern.MatchString(tool)) {
			return fmt.Errorf("tools.allow: %q is not mcp__<server> or mcp__<server>__<tool>", t)
		}
		if slices.Contains(r.ReservedMCP, server) {
			return fmt.Errorf("tools.allow: %q: the %s tools are not configured here (publishing is)", t, server)
		}
	}
	if s.Notifications != nil && string(s.Notifications) != "null" {
		if r.Notifications == nil {
			return errors.New("notifications: this server sends no notifications")
		}
		if err := r.Notifications(s.Notifications); err != nil {
			return fmt.Errorf("notifications: %w", err)
		}
		l.Notifications = s.Notifications
	}
	l.Model, l.Publishing, l.Limits, l.Tools = s.Model, s.Publishing, s.Limits, s.Tools
	return nil
}

// mcpServer is the part of an .mcp.json server entry that is checked.
type mcpServer struct {
	Type    string            `json:"type"`
	Command string            `json:"command"`
	Args    []string          `json:"args"`
	Env     map[string]string `json:"env"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
}

// parseMCP reads mcp.json into l; outside refuses an absolute path that
// resolves into the vault.
func parseMCP(data []byte, r Rules, outside func(string) error, l *Layer) error {
	var f struct {
		MCPServers map[string]json.RawMessage `json:"mcpServers"`
	}
	if err := decodeStrict(data, &f); err != nil {
		return err
	}
	for name, raw := range f.MCPServers {
		if !mcpNamePattern.MatchString(name) {
			return fmt.Errorf("mcpServers: %q is not a server name (letters, digits, - and _)", name)
		}
		if slices.Contains(r.ReservedMCP, name) {
			return fmt.Errorf("mcpServers: the name %q is the server's own", name)
		}
		var s mcpServer
		if err := decodeStrict(raw, &s); err != nil {
			return fmt.Errorf("mcpServers.%s: %w", name, err)
		}
		if err := checkMCPServer(s, r.MCPWorkDir, outside); err != nil {
			return fmt.Errorf("mcpServers.%s: %w", name, err)
		}
	}
	l.MCPServers = f.MCPServers
	return nil
}

func checkMCPServer(s mcpServer, workDir string, outside func(string) error) error {
	switch s.Type {
	case "", "stdio":
		switch {
		case s.Command == "":
			return errors.New("a stdio server needs a command")
		case s.URL != "" || s.Headers != nil:
			return errors.New("a stdio server has no url or headers")
		case strings.HasPrefix(s.Command, "-") || strings.ContainsFunc(s.Command, isMCPCut) || strings.Contains(s.Command, ":"):
			// It is one path, which the CLI does not split, started
			// behind env (package assembly), which would read a leading
			// - as its option and NAME=VALUE as a variable.
			return fmt.Errorf("command %q must be an absolute path or a name on PATH", s.Command)
		}
		if err := checkMCPArg("command", s.Command, workDir, outside); err != nil {
			return err
		}
		for _, a := range s.Args {
			if err := checkMCPArg("argument", a, workDir, outside); err != nil {
				return err
			}
		}
	case "http", "sse":
		if s.Command != "" || s.Args != nil || s.Env != nil {
			return fmt.Errorf("an %s server has no command, args or env", s.Type)
		}
		u, err := url.Parse(s.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("url %q is not an http(s) URL", s.URL)
		}
	default:
		return fmt.Errorf("type %q: must be stdio, http or sse", s.Type)
	}
	return nil
}

var (
	// hostURL is a URL that names a host, whose path is on that host.
	hostURL = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*://[^/\\]`)
	// npmScoped is a scoped npm package, @scope/name[@version].
	npmScoped = regexp.MustCompile(`^@[a-z0-9][a-z0-9._~-]*/[a-z0-9][a-z0-9._~-]*(@[^/\\]*)?$`)
	// fileName is a word whose part after its last dot is an extension
	// (evil.sh, server.py, .env), unlike a version or a number (1.2).
	fileName = regexp.MustCompile(`\.[A-Za-z][A-Za-z0-9]*$`)
)

// isMCPCut tells where an MCP command or argument is cut into the pieces
// checkMCPArg judges: white space, quotes, and what separates a flag from
// its value, a list's items and a shell line's words.
func isMCPCut(r rune) bool {
	return unicode.IsSpace(r) || strings.ContainsRune("\"'`=,;|&<>()", r)
}

// checkMCPArg is the rule for the command and each argument (what says
// which) of a configured stdio MCP server, written down in the README
// ("Session configuration"): none may name a file the agent can write,
// that is, a file in the vault or a relative one (the CLI's working folder
// is the person's). The servers run in workDir, outside the vault, so a
// plain word, which cannot be told from a file name without an extension
// (stdio, serve), does not reach the vault either. outside refuses an
// absolute path that resolves into the vault.
func checkMCPArg(what, arg, workDir string, outside func(string) error) error {
	refuse := func(piece, reason string) error {
		if piece == arg {
			return fmt.Errorf("%s %q %s", what, arg, reason)
		}
		return fmt.Errorf("%s %q: %q %s", what, arg, piece, reason)
	}
	hint := "give an absolute path outside the vault"
	if what == "command" {
		hint += " or a name on PATH"
	}
	if strings.Contains(arg, "${") {
		return fmt.Errorf("%s %q: the CLI replaces ${...} with an environment variable, which may name a folder of the vault; write the value itself", what, arg)
	}
	for _, piece := range strings.FieldsFunc(arg, isMCPCut) {
		if strings.HasPrefix(strings.ToLower(piece), "file:") {
			return refuse(piece, "is a file URL: give the path itself, absolute and outside the vault")
		}
		if hostURL.MatchString(piece) {
			continue
		}
		for _, p := range strings.Split(piece, ":") {
			if reason := checkMCPPiece(p, hint, workDir, outside); reason != "" {
				return refuse(p, reason)
			}
		}
	}
	return nil
}

// checkMCPPiece judges one piece of an MCP command or argument: why it is
// refused, ending in hint, or "".
func checkMCPPiece(p, hint, workDir string, outside func(string) error) string {
	switch {
	case p == "":
		return ""
	case strings.HasPrefix(p, "~"):
		return "is relative to a home folder: " + hint
	case strings.HasPrefix(p, "/"):
		if slices.Contains(strings.Split(p, "/"), "..") {
			return "has a .. element, and where it leads depends on the links before it: " + hint
		}
		if strings.Contains(p, `\`) {
			return "has a \\, a separator on Windows: " + hint
		}
		if err := outside(filepath.Clean(p)); err != nil {
			return err.Error()
		}
		return ""
	case npmScoped.MatchString(p):
		return ""
	case strings.ContainsAny(p, `/\`):
		return "is a relative path: " + hint
	case strings.HasPrefix(p, "-"):
		return ""
	case p == "." || p == ".." || fileName.MatchString(p):
		return "is a file relative to the working folder: " + hint
	}
	if err := outside(filepath.Join(workDir, p)); err != nil {
		return "names a file in the MCP servers' working directory " + workDir + " that " + err.Error()
	}
	return ""
}

// checkSkill checks the SKILL.md of the skill named name: front matter
// between --- lines with a description, which is what the model is shown
// to pick the skill, and a name, if any, that is the folder's.
func checkSkill(name string, content []byte) error {
	text := strings.ReplaceAll(string(content), "\r\n", "\n")
	rest, ok := strings.CutPrefix(text, "---\n")
	if !ok {
		return errors.New("does not start with front matter (a --- line)")
	}
	front, _, ok := strings.Cut(rest, "\n---")
	if !ok {
		return errors.New("front matter has no closing --- line")
	}
	described := false
	for _, line := range strings.Split(front, "\n") {
		if v, ok := strings.CutPrefix(line, "description:"); ok && strings.TrimSpace(v) != "" {
			described = true
		}
		if v, ok := strings.CutPrefix(line, "name:"); ok && strings.Trim(strings.TrimSpace(v), `"'`) != name {
			return fmt.Errorf("front matter names it %s, its folder %q", strings.TrimSpace(v), name)
		}
	}
	if !described {
		return errors.New("front matter has no description")
	}
	return nil
}
