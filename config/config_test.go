package config_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/config"
)

// world is a configuration directory, a vault beside it and the MCP
// servers' working directory.
type world struct {
	dir, vault string
	rules      config.Rules
}

func newWorld(tb testing.TB) *world {
	tb.Helper()
	base := tb.TempDir()
	w := &world{dir: filepath.Join(base, "config"), vault: filepath.Join(base, "vault"), rules: config.Rules{
		Disableable: []string{"Read", "Write", "WebSearch", "WebFetch"},
		Addable:     []string{"TodoWrite"},
		ReservedMCP: []string{"linkedin"},
		MCPWorkDir:  filepath.Join(base, "work"),
	}}
	for _, d := range []string{filepath.Join(w.vault, "sebastian"), w.rules.MCPWorkDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			tb.Fatal(err)
		}
	}
	return w
}

// write replaces the file at rel (under the configuration directory) the
// way an editor saving atomically does: a new file renamed over the old.
func (w *world) write(tb testing.TB, rel, text string) {
	tb.Helper()
	path := filepath.Join(w.dir, rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		tb.Fatal(err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		tb.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		tb.Fatal(err)
	}
}

func (w *world) open(tb testing.TB) (*config.Store, error) {
	tb.Helper()
	return config.Open(config.Config{Dir: w.dir, Vault: w.vault, Rules: w.rules, Logger: zerolog.New(zerolog.NewTestWriter(tb))})
}

func (w *world) mustOpen(tb testing.TB) *config.Store {
	tb.Helper()
	s, err := w.open(tb)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func skill(name, desc string) string {
	return "---\nname: " + name + "\ndescription: " + desc + "\n---\nDo it.\n"
}

func TestNoConfigurationIsEmpty(t *testing.T) {
	w := newWorld(t)
	got := w.mustOpen(t).For("sebastian")
	if got.Model != "" || got.Prompt != "" || got.MCPServers != nil || got.Skills != nil || got.Limits != (config.Limits{}) || got.Publishing != "" {
		t.Fatalf("no files, yet %+v", got)
	}
}

func TestPersonOverridesServer(t *testing.T) {
	w := newWorld(t)
	w.write(t, "server/config.json", `{"model":"sonnet","publishing":"ask","limits":{"session_usd":2,"max_turns":30},"tools":{"disable":["WebSearch"],"allow":["mcp__calendar"]}}`)
	w.write(t, "server/mcp.json", `{"mcpServers":{"calendar":{"command":"/usr/bin/cal-mcp"},"wiki":{"type":"http","url":"https://wiki.example/mcp"}}}`)
	w.write(t, "server/prompt.md", "Server section.\n")
	w.write(t, "server/skills/summarize/SKILL.md", skill("summarize", "server summary"))
	w.write(t, "server/skills/cite/SKILL.md", skill("cite", "server cite"))
	w.write(t, "persons/sebastian/config.json", `{"model":"opus","publishing":"auto","limits":{"session_usd":5},"tools":{"disable":[]}}`)
	w.write(t, "persons/sebastian/mcp.json", `{"mcpServers":{"calendar":{"command":"/opt/sebastian/cal"}}}`)
	w.write(t, "persons/sebastian/prompt.md", "Sebastian's section.")
	w.write(t, "persons/sebastian/skills/summarize/SKILL.md", skill("summarize", "his summary"))
	s := w.mustOpen(t)

	seb := s.For("sebastian")
	if seb.Model != "opus" || seb.Publishing != "auto" {
		t.Errorf("model %q publishing %q, want the person's", seb.Model, seb.Publishing)
	}
	if *seb.Limits.SessionUSD != 5 || *seb.Limits.MaxTurns != 30 || seb.Limits.PersonDayUSD != nil {
		t.Errorf("limits %+v: want session 5 (person), turns 30 (server), no day limit", seb.Limits)
	}
	if seb.Tools.Disable == nil || len(seb.Tools.Disable) != 0 || len(seb.Tools.Allow) != 1 {
		t.Errorf("tools %+v: the person's empty disable list replaces the server's, allow stays", seb.Tools)
	}
	if seb.Prompt != "Server section.\n\nSebastian's section." {
		t.Errorf("prompt %q", seb.Prompt)
	}
	if got := string(seb.MCPServers["calendar"]); !strings.Contains(got, "/opt/sebastian/cal") || seb.MCPServers["wiki"] == nil {
		t.Errorf("mcp servers %v: the person's calendar, the server's wiki", seb.MCPServers)
	}
	if len(seb.Skills) != 2 || seb.Skills[0].Name != "cite" || !strings.Contains(string(seb.Skills[1].Content), "his summary") {
		t.Errorf("skills %+v", seb.Skills)
	}

	petra := s.For("petra")
	if petra.Model != "sonnet" || petra.Publishing != "ask" || *petra.Limits.SessionUSD != 2 || petra.Prompt != "Server section." {
		t.Errorf("petra gets the server's layer only: %+v", petra)
	}
	if got := string(petra.MCPServers["calendar"]); !strings.Contains(got, "/usr/bin/cal-mcp") {
		t.Errorf("petra's calendar %s", got)
	}
}

// TestBrokenFileAtStart: every kind of mistake stops the start with the
// file's path and the reason.
func TestBrokenFileAtStart(t *testing.T) {
	cases := []struct {
		name, file, text, reason string
	}{
		{"bad JSON", "server/config.json", `{"model":`, "not valid JSON"},
		{"unknown key", "persons/petra/config.json", `{"modle":"opus"}`, `unknown field "modle"`},
		{"two values", "server/config.json", `{} {}`, "more than one JSON value"},
		{"bad model", "server/config.json", `{"model":"--dangerously"}`, "not a model name"},
		{"bad publishing", "server/config.json", `{"publishing":"yes"}`, `publishing "yes"`},
		{"negative budget", "server/config.json", `{"limits":{"person_day_usd":-1}}`, "limits.person_day_usd"},
		{"negative turns", "server/config.json", `{"limits":{"max_turns":-3}}`, "limits.max_turns"},
		{"unknown limit", "server/config.json", `{"limits":{"usd":3}}`, `unknown field "usd"`},
		{"disable unknown tool", "server/config.json", `{"tools":{"disable":["Bash"]}}`, `"Bash" is not one of`},
		{"add a shell", "server/config.json", `{"tools":{"add":["Bash"]}}`, `"Bash" cannot be added`},
		{"allow not mcp", "server/config.json", `{"tools":{"allow":["Write"]}}`, "is not mcp__<server>"},
		{"allow publishing", "server/config.json", `{"tools":{"allow":["mcp__linkedin__linkedin_post"]}}`, "publishing is"},
		{"mcp unknown key", "server/mcp.json", `{"mcpServers":{"x":{"command":"x","cwd":"/"}}}`, `unknown field "cwd"`},
		{"mcp top key", "server/mcp.json", `{"servers":{}}`, `unknown field "servers"`},
		{"mcp sdk", "server/mcp.json", `{"mcpServers":{"x":{"type":"sdk"}}}`, `type "sdk"`},
		{"mcp reserved", "server/mcp.json", `{"mcpServers":{"linkedin":{"command":"x"}}}`, "the server's own"},
		{"mcp relative command", "server/mcp.json", `{"mcpServers":{"x":{"command":"./run.sh"}}}`, `command "./run.sh" is a relative path`},
		{"mcp command with arguments", "server/mcp.json", `{"mcpServers":{"x":{"command":"node run"}}}`, "must be an absolute path or a name on PATH"},
		{"mcp relative argument", "server/mcp.json", `{"mcpServers":{"x":{"command":"sh","args":["./run.sh"]}}}`, `"./run.sh" is a relative path`},
		{"mcp no command", "server/mcp.json", `{"mcpServers":{"x":{"args":["a"]}}}`, "needs a command"},
		{"mcp bad url", "server/mcp.json", `{"mcpServers":{"x":{"type":"http","url":"file:///etc"}}}`, "not an http(s) URL"},
		{"skill without front matter", "server/skills/a/SKILL.md", "Just do it.", "front matter"},
		{"skill without description", "server/skills/a/SKILL.md", "---\nname: a\n---\nx", "no description"},
		{"skill named otherwise", "server/skills/a/SKILL.md", skill("b", "d"), `its folder "a"`},
		{"skill folder name", "server/skills/A b/SKILL.md", skill("A b", "d"), "folder name"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			w.write(t, tc.file, tc.text)
			_, err := w.open(t)
			if err == nil {
				t.Fatal("opened")
			}
			if !strings.Contains(err.Error(), filepath.Join(w.dir, tc.file)) && !strings.Contains(err.Error(), filepath.Dir(filepath.Join(w.dir, tc.file))) {
				t.Errorf("error does not name the file: %v", err)
			}
			if !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("error %q does not say %q", err, tc.reason)
			}
		})
	}
	t.Run("skill folder without SKILL.md", func(t *testing.T) {
		w := newWorld(t)
		w.write(t, "server/skills/a/notes.md", "x")
		if _, err := w.open(t); err == nil || !strings.Contains(err.Error(), "SKILL.md") {
			t.Fatalf("got %v", err)
		}
	})
}

// TestChangesApplyWithoutRestart: a change is seen by the next For; a
// broken file keeps the last good configuration and is reported until it
// is fixed.
func TestChangesApplyWithoutRestart(t *testing.T) {
	w := newWorld(t)
	w.write(t, "persons/sebastian/config.json", `{"model":"one"}`)
	s := w.mustOpen(t)
	if got := s.For("sebastian").Model; got != "one" {
		t.Fatalf("model %q", got)
	}
	w.write(t, "persons/sebastian/config.json", `{"model":"two"}`)
	if got := s.For("sebastian").Model; got != "two" {
		t.Fatalf("after the change: model %q", got)
	}
	w.write(t, "persons/sebastian/config.json", `{"model":"three",}`)
	w.write(t, "persons/sebastian/prompt.md", "New section.")
	got := s.For("sebastian")
	if got.Model != "two" || got.Prompt != "" {
		t.Fatalf("a broken file must keep the whole last good layer: %+v", got)
	}
	probs := s.Problems()
	if len(probs) != 1 || probs[0].Path != filepath.Join(w.dir, "persons/sebastian/config.json") || !strings.Contains(probs[0].Reason, "JSON") {
		t.Fatalf("problems %+v", probs)
	}
	if got := s.For("petra").Model; got != "" {
		t.Fatalf("petra: %q", got)
	}
	w.write(t, "persons/petra/mcp.json", `{"mcpServers":{"x":{}}}`)
	if probs := s.Check(); len(probs) != 2 || probs[0].Path != filepath.Join(w.dir, "persons/petra/mcp.json") {
		t.Fatalf("Check: %+v", probs)
	}
	if err := os.Remove(filepath.Join(w.dir, "persons/petra/mcp.json")); err != nil {
		t.Fatal(err)
	}
	w.write(t, "persons/sebastian/config.json", `{"model":"three"}`)
	if got := s.For("sebastian"); got.Model != "three" || got.Prompt != "New section." {
		t.Fatalf("after the fix: %+v", got)
	}
	if probs := s.Check(); len(probs) != 0 {
		t.Fatalf("problems after the fix: %+v", probs)
	}

	// A person's folder made after the start, and a skill added later.
	w.write(t, "persons/petra/skills/cite/SKILL.md", skill("cite", "cite"))
	if got := s.For("petra").Skills; len(got) != 1 || got[0].Name != "cite" {
		t.Fatalf("petra's new skill: %+v", got)
	}
	if err := os.RemoveAll(filepath.Join(w.dir, "persons/petra/skills/cite")); err != nil {
		t.Fatal(err)
	}
	if got := s.For("petra").Skills; len(got) != 0 {
		t.Fatalf("a removed skill stays: %+v", got)
	}
}

// TestNothingFromTheVault: the configuration directory in the vault, or a
// file or folder linked into it, is refused.
func TestNothingFromTheVault(t *testing.T) {
	t.Run("directory inside the vault", func(t *testing.T) {
		w := newWorld(t)
		w.dir = filepath.Join(w.vault, ".major")
		if _, err := w.open(t); err == nil || !strings.Contains(err.Error(), "vault") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("directory linked into the vault", func(t *testing.T) {
		w := newWorld(t)
		if err := os.Symlink(filepath.Join(w.vault, "sebastian"), w.dir); err != nil {
			t.Fatal(err)
		}
		if _, err := w.open(t); err == nil || !strings.Contains(err.Error(), "vault") {
			t.Fatalf("got %v", err)
		}
	})
	links := []struct{ name, link, target string }{
		{"prompt linked to a note", "persons/sebastian/prompt.md", "sebastian/prompt.md"},
		{"person folder linked", "persons/sebastian", "sebastian"},
		{"skills folder linked", "persons/sebastian/skills", "sebastian/skills"},
		{"skill linked", "persons/sebastian/skills/evil", "sebastian/evil"},
	}
	for _, tc := range links {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			w.write(t, "server/config.json", `{}`)
			target := filepath.Join(w.vault, tc.target)
			writeVault := func(rel, text string) {
				p := filepath.Join(w.vault, rel)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			writeVault("sebastian/prompt.md", "PLANTED")
			writeVault("sebastian/skills/evil/SKILL.md", skill("evil", "PLANTED"))
			writeVault("sebastian/evil/SKILL.md", skill("evil", "PLANTED"))
			link := filepath.Join(w.dir, tc.link)
			if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, link); err != nil {
				t.Fatal(err)
			}
			if _, err := w.open(t); err == nil || !strings.Contains(err.Error(), "vault") {
				t.Fatalf("at start: got %v", err)
			}
			// Made after the start: reported, never read.
			if err := os.Remove(link); err != nil {
				t.Fatal(err)
			}
			s := w.mustOpen(t)
			if err := os.Symlink(target, link); err != nil {
				t.Fatal(err)
			}
			got := s.For("sebastian")
			if raw, _ := json.Marshal(got); strings.Contains(string(raw), "PLANTED") || strings.Contains(got.Prompt, "PLANTED") || len(got.Skills) > 0 {
				t.Fatalf("read from the vault: %+v", got)
			}
			if probs := s.Problems(); len(probs) != 1 || !strings.Contains(probs[0].Reason, "vault") {
				t.Fatalf("problems %+v", probs)
			}
		})
	}
	t.Run("mcp command in the vault", func(t *testing.T) {
		w := newWorld(t)
		w.write(t, "server/mcp.json", `{"mcpServers":{"x":{"command":"`+filepath.Join(w.vault, "sebastian", "run")+`"}}}`)
		if _, err := w.open(t); err == nil || !strings.Contains(err.Error(), "in the vault") {
			t.Fatalf("got %v", err)
		}
	})
}

// Limits, asked for with every message, follow the settings files as For
// does: a change holds for the next call, the person's over the server's,
// and a broken file keeps the last good limits; a change elsewhere in the
// layer does not make them read again.
func TestLimitsFollowTheSettingsFiles(t *testing.T) {
	w := newWorld(t)
	w.write(t, "server/config.json", `{"limits":{"session_usd":5,"max_turns":10}}`)
	s := w.mustOpen(t)
	usd := func(l config.Limits) float64 {
		if l.SessionUSD == nil {
			return -1
		}
		return *l.SessionUSD
	}
	if got := s.Limits("sebastian"); usd(got) != 5 || got.MaxTurns == nil || *got.MaxTurns != 10 {
		t.Fatalf("server limits: %+v", got)
	}
	w.write(t, "persons/sebastian/config.json", `{"limits":{"session_usd":2}}`)
	if got := s.Limits("sebastian"); usd(got) != 2 || *got.MaxTurns != 10 {
		t.Fatalf("the person's limit over the server's: %+v", got)
	}
	if got := s.Limits("petra"); usd(got) != 5 {
		t.Fatalf("petra has the server's: %+v", got)
	}
	w.write(t, "server/config.json", `{"limits":{"session_usd":7,"max_turns":3}}`)
	if got := s.Limits("petra"); usd(got) != 7 || *got.MaxTurns != 3 {
		t.Fatalf("after the server's change: %+v", got)
	}
	w.write(t, "persons/sebastian/config.json", `{"limits":{"session_usd":1},}`)
	if got := s.Limits("sebastian"); usd(got) != 2 || *got.MaxTurns != 3 {
		t.Fatalf("a broken file keeps the last good limits: %+v", got)
	}
	if probs := s.Problems(); len(probs) != 1 || probs[0].Path != filepath.Join(w.dir, "persons/sebastian/config.json") {
		t.Fatalf("problems: %+v", probs)
	}
	w.write(t, "persons/sebastian/config.json", `{"limits":{"session_usd":1}}`)
	if got := s.Limits("sebastian"); usd(got) != 1 {
		t.Fatalf("after the fix: %+v", got)
	}
	if probs := s.Problems(); len(probs) != 0 {
		t.Fatalf("problems after the fix: %+v", probs)
	}
	// The prompt changed, not the settings: the limits stand, and For
	// still sees the new prompt.
	w.write(t, "persons/sebastian/prompt.md", "Be brief.")
	if got := s.Limits("sebastian"); usd(got) != 1 {
		t.Fatalf("limits after a prompt change: %+v", got)
	}
	if got := s.For("sebastian"); got.Prompt != "Be brief." || usd(got.Limits) != 1 {
		t.Fatalf("For after a prompt change: %+v", got)
	}
}

// TestMCPCommandLine is the rule for a stdio server's command and
// arguments: nothing relative and nothing in the vault, in any form, while
// flags, numbers, URLs, npm packages and plain words pass. A refused file
// stops the start with its path and the argument, and while the server
// runs it keeps the last good servers.
func TestMCPCommandLine(t *testing.T) {
	w := newWorld(t)
	seb := filepath.Join(w.vault, "sebastian")
	outside := t.TempDir()
	mustLink := func(target, link string) string {
		t.Helper()
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		return link
	}
	if err := os.WriteFile(filepath.Join(seb, "evil.sh"), []byte("touch ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "server.js"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	toVaultFile := mustLink(filepath.Join(seb, "evil.sh"), filepath.Join(outside, "link.sh"))
	toVaultDir := mustLink(seb, filepath.Join(outside, "notes"))
	dangling := mustLink(filepath.Join(seb, "later.sh"), filepath.Join(outside, "later.sh"))
	toOutside := mustLink(filepath.Join(outside, "server.js"), filepath.Join(outside, "current.js"))
	// A plain word names a file in the servers' working directory.
	mustLink(seb, filepath.Join(w.rules.MCPWorkDir, "notes"))

	cases := []struct {
		name    string
		command string
		args    []string
		refused bool
	}{
		{"npx package", "npx", []string{"-y", "@modelcontextprotocol/server-filesystem", "/srv/shared"}, false},
		{"npm versions", "npx", []string{"-y", "mcp-remote@1.2.3", "@scope/pkg@latest", "pkg@^2"}, false},
		{"flags and numbers", "uvx", []string{"mcp-server-fetch", "--port", "8080", "--port=8080", "-p=3000", "-y", "1.5", "-", ""}, false},
		{"flag with dots", "java", []string{"-Dlog.level=debug", "-test.run=^$"}, false},
		{"URLs", "mcp-remote", []string{"https://example.com/mcp", "--url=https://example.com/x?a=b", "wss://host:8443/x"}, false},
		{"plain words", "server", []string{"stdio", "serve", "evil", "localhost:8080"}, false},
		{"absolute paths outside", "/usr/bin/node", []string{filepath.Join(outside, "server.js"), "/opt/mcp/not-yet.js", "--config=/etc/mcp/config.json", "--allow=/srv/a,/srv/b:/srv/c"}, false},
		{"link outside to outside", toOutside, []string{toOutside}, false},
		{"versioned command", "python3.12", []string{"-m", "server"}, false},

		{"bare file name", "sh", []string{"evil.sh"}, true},
		{"bare python file", "python3", []string{"server.py"}, true},
		{"hidden file", "sh", []string{".env"}, true},
		{"dot", "node", []string{"."}, true},
		{"dot dot", "node", []string{".."}, true},
		{"dot slash", "sh", []string{"./evil.sh"}, true},
		{"dot dot slash", "sh", []string{"../sebastian/evil.sh"}, true},
		{"folder", "sh", []string{"tools/evil"}, true},
		{"home", "sh", []string{"~/evil"}, true},
		{"home alone", "sh", []string{"~"}, true},
		{"long flag file name", "server", []string{"--script=evil.sh"}, true},
		{"long flag relative", "server", []string{"--script=./evil"}, true},
		{"short flag folder", "server", []string{"-f=tools/evil"}, true},
		{"short flag home", "server", []string{"-f=~/evil"}, true},
		{"flag in a flag", "server", []string{"--a=--b=./evil"}, true},
		{"glued short flag", "server", []string{"-o./evil"}, true},
		{"at file", "curl", []string{"-d", "@" + filepath.Join(seb, "evil.sh")}, true},
		{"backslash", "sh", []string{`tools\evil`}, true},
		{"dot backslash", "sh", []string{`.\evil`}, true},
		{"drive letter", "sh", []string{`C:\tools\evil`}, true},
		{"network share", "sh", []string{`\\server\share\evil`}, true},
		{"absolute in the vault", "sh", []string{filepath.Join(seb, "evil.sh")}, true},
		{"vault folder", "server", []string{"--root=" + seb}, true},
		{"not yet written in the vault", "sh", []string{filepath.Join(seb, "new.sh")}, true},
		{"link to a vault file", "sh", []string{toVaultFile}, true},
		{"through a link to a vault folder", "sh", []string{filepath.Join(toVaultDir, "evil.sh")}, true},
		{"link that points nowhere", "sh", []string{dangling}, true},
		{"dot dot in an absolute path", "sh", []string{toVaultDir + "/../sebastian/evil.sh"}, true},
		{"backslash in an absolute path", "sh", []string{`/opt\evil`}, true},
		{"variable", "sh", []string{"${PWD}/evil.sh"}, true},
		{"variable with default", "server", []string{"--root=${NOPE:-/srv}"}, true},
		{"file URL", "server", []string{"file:///opt/x"}, true},
		{"shell line relative", "sh", []string{"-c", "sh ./evil"}, true},
		{"shell line absolute", "sh", []string{"-c", "/bin/cat " + filepath.Join(seb, "evil.sh") + "|sh"}, true},
		{"path list", "server", []string{"--path=/srv/a:" + seb}, true},
		{"comma list", "server", []string{"--path=/srv/a," + seb}, true},
		{"word naming the vault from the working directory", "server", []string{"--root=notes"}, true},

		{"relative command", "./evil.sh", nil, true},
		{"file name command", "evil.sh", nil, true},
		{"folder command", "tools/evil", nil, true},
		{"command in the vault", filepath.Join(seb, "evil.sh"), nil, true},
		{"command through a link", toVaultFile, nil, true},
		{"command with arguments", "node server", nil, true},
		{"command as a flag", "-evil", nil, true},
		{"command as a variable", "PATH=/x", nil, true},
		{"command from the home folder", "~/bin/evil", nil, true},
	}
	good := `{"mcpServers":{"good":{"command":"/usr/bin/good"}}}`
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			server := map[string]any{"command": tc.command}
			if tc.args != nil {
				server["args"] = tc.args
			}
			raw, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{"x": server}})
			w.write(t, "persons/sebastian/mcp.json", string(raw))
			_, err := w.open(t)
			if !tc.refused {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("allowed")
			}
			offending := tc.command
			if len(tc.args) > 0 {
				offending = tc.args[len(tc.args)-1]
			}
			if !strings.Contains(err.Error(), filepath.Join(w.dir, "persons/sebastian/mcp.json")) || !strings.Contains(err.Error(), "mcpServers.x") || !strings.Contains(err.Error(), strconv.Quote(offending)) {
				t.Errorf("the error does not name the file, the server and %q: %v", offending, err)
			}
			t.Log(err)

			w.write(t, "persons/sebastian/mcp.json", good)
			s := w.mustOpen(t)
			w.write(t, "persons/sebastian/mcp.json", string(raw))
			if got := s.For("sebastian").MCPServers; got["x"] != nil || got["good"] == nil {
				t.Errorf("while running: servers %v, want the last good ones", got)
			}
			if probs := s.Problems(); len(probs) != 1 || !strings.Contains(probs[0].Reason, "mcpServers.x") {
				t.Errorf("problems %+v", probs)
			}
		})
	}
}

// TestMCPWorkDirOutsideTheVault: the servers' working directory must be
// an absolute path outside the vault, or a plain word could name a file
// the agent wrote.
func TestMCPWorkDirOutsideTheVault(t *testing.T) {
	cases := []struct {
		name string
		dir  func(w *world) string
	}{
		{"relative", func(*world) string { return "work" }},
		{"unset", func(*world) string { return "" }},
		{"in the vault", func(w *world) string { return filepath.Join(w.vault, "sebastian") }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			w.rules.MCPWorkDir = tc.dir(w)
			if _, err := w.open(t); err == nil || !strings.Contains(err.Error(), "working directory") {
				t.Fatalf("got %v", err)
			}
		})
	}
}

// TestNotifications: the notifications key is checked by the rule the
// server gives (a broken one stops the start), the person's replaces the
// server's whole, and a change applies without a restart.
func TestNotifications(t *testing.T) {
	w := newWorld(t)
	w.rules.Notifications = func(raw []byte) error {
		var n struct {
			Events []string `json:"events"`
		}
		if err := json.Unmarshal(raw, &n); err != nil {
			return err
		}
		for _, e := range n.Events {
			if e != "question" && e != "done" {
				return errors.New("unknown event " + e)
			}
		}
		return nil
	}
	w.write(t, "server/config.json", `{"notifications":{"events":["done"]}}`)
	s := w.mustOpen(t)
	if got := string(s.Notifications("sebastian")); got != `{"events":["done"]}` {
		t.Fatalf("the server's: %s", got)
	}
	w.write(t, "persons/sebastian/config.json", `{"notifications":{"events":["question"],"quiet_hours":null}}`)
	if got := string(s.Notifications("sebastian")); got != `{"events":["question"],"quiet_hours":null}` {
		t.Fatalf("the person's: %s", got)
	}
	if got := string(s.For("petra").Notifications); got != `{"events":["done"]}` {
		t.Fatalf("another person's: %s", got)
	}
	w.write(t, "persons/petra/config.json", `{"notifications":{"events":["everything"]}}`)
	if _, err := w.open(t); err == nil || !strings.Contains(err.Error(), "unknown event everything") {
		t.Fatalf("a broken notifications key at start: %v", err)
	}
	w.rules.Notifications = nil
	w.write(t, "persons/petra/config.json", `{}`)
	if _, err := w.open(t); err == nil || !strings.Contains(err.Error(), "sends no notifications") {
		t.Fatalf("notifications on a server that sends none: %v", err)
	}
}
