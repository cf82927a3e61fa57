package assembly_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/assembly"
	"github.com/majorhq/major/config"
	"github.com/majorhq/major/hooks"
	"github.com/majorhq/major/relay"
	"github.com/majorhq/major/supervisor"
	"github.com/majorhq/major/vault"
)

// fakeHooks is an assembly.Hooks whose answers the test sets.
type fakeHooks struct {
	matchers   map[string][]supervisor.HookMatcher
	endTurn    func(sessionID string)
	commitTurn func(ctx context.Context, person, sessionID string) error
}

func (f *fakeHooks) Matchers() map[string][]supervisor.HookMatcher { return f.matchers }

func (f *fakeHooks) Handle(context.Context, hooks.Caller, *supervisor.ControlRequest) (json.RawMessage, error) {
	return json.RawMessage(`{"continue":true}`), nil
}

func (f *fakeHooks) EndTurn(sessionID string) {
	if f.endTurn != nil {
		f.endTurn(sessionID)
	}
}

func (f *fakeHooks) CommitTurn(ctx context.Context, person, sessionID string) error {
	if f.commitTurn != nil {
		return f.commitTurn(ctx, person, sessionID)
	}
	return nil
}

func (f *fakeHooks) CommitRewind(ctx context.Context, person, sessionID string) error {
	return f.CommitTurn(ctx, person, sessionID)
}

func (f *fakeHooks) BeginRewind(context.Context, string) (func(), error) { return func() {}, nil }

// fakeMCP is an assembly.MCP that answers every message with nothing,
// records approvals and warns about the calls in warn (person + " " +
// tool + " " + args).
type fakeMCP struct {
	warn     map[string]bool
	approved *[]string
}

func (fakeMCP) HandleMessage(context.Context, string, json.RawMessage) (json.RawMessage, error) {
	return nil, nil
}

func (f fakeMCP) Approve(person, tool string, args json.RawMessage) {
	if f.approved != nil {
		*f.approved = append(*f.approved, person+" "+tool+" "+string(args))
	}
}

func (f fakeMCP) Warning(person, tool string, args json.RawMessage) string {
	if f.warn[person+" "+tool+" "+string(args)] {
		return "Careful: sent before."
	}
	return ""
}

func newLauncher(tb testing.TB, h assembly.Hooks, autoPublish ...string) (*assembly.Launcher, string) {
	return newLauncherMCP(tb, h, fakeMCP{}, autoPublish...)
}

func newLauncherMCP(tb testing.TB, h assembly.Hooks, mcp assembly.MCP, autoPublish ...string) (*assembly.Launcher, string) {
	tb.Helper()
	root := tb.TempDir()
	auto := map[string]bool{}
	for _, p := range autoPublish {
		auto[p] = true
	}
	if h == nil {
		h = &fakeHooks{}
	}
	return assembly.New(assembly.Config{
		Claude:       "/opt/claude",
		Env:          []string{"HOME=/home/major"},
		VaultRoot:    root,
		AskTimeout:   7 * time.Minute,
		StallTimeout: 3 * time.Minute,
		AutoPublish:  auto,
		Hooks:        h,
		MCP:          mcp,
		Logger:       zerolog.Nop(),
	}), root
}

// seedTools are the tools of shared/seeds/000 (the LinkedIn ones as the
// CLI names them) plus AskUserQuestion and ExitPlanMode: no shell, no
// other tool.
var seedTools = []string{
	"AskUserQuestion", "Edit", "ExitPlanMode", "Glob", "Grep", "Read", "WebFetch", "WebSearch", "Write",
	"mcp__linkedin__linkedin_post", "mcp__linkedin__linkedin_post_comment",
	"mcp__linkedin__linkedin_read_comments", "mcp__linkedin__linkedin_reply_comment",
}

var publishingTools = []string{
	"mcp__linkedin__linkedin_post", "mcp__linkedin__linkedin_post_comment", "mcp__linkedin__linkedin_reply_comment",
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func TestSpec(t *testing.T) {
	matchers := map[string][]supervisor.HookMatcher{"PreToolUse": {{Matcher: "*", HookCallbackIDs: []string{"guard"}}}}
	l, root := newLauncher(t, &fakeHooks{matchers: matchers}, "petra")
	for _, tc := range []struct {
		person      string
		autoPublish bool
	}{
		{"sebastian", false},
		{"petra", true},
	} {
		t.Run(tc.person, func(t *testing.T) {
			spec := l.Spec(tc.person)
			if got := sorted(spec.Tools); !slices.Equal(got, seedTools) {
				t.Fatalf("tools\n got %v\nwant %v", got, seedTools)
			}
			allowed := map[string]bool{}
			for _, tool := range spec.AllowedTools {
				allowed[tool] = true
				if !slices.Contains(spec.Tools, tool) {
					t.Errorf("allowed tool %s is not in the tool set", tool)
				}
			}
			for _, tool := range append(assembly.FileTools(), assembly.WebTools()...) {
				edit := slices.Contains(assembly.EditTools(), tool)
				if !allowed[tool] && !edit {
					t.Errorf("%s is asked; file and web tools run without asking", tool)
				}
				if allowed[tool] && edit {
					t.Errorf("%s is in the allowed set: it would run without asking in default mode", tool)
				}
			}
			if !allowed["mcp__linkedin__linkedin_read_comments"] {
				t.Errorf("reading comments is asked")
			}
			if allowed["AskUserQuestion"] {
				t.Errorf("AskUserQuestion is in the allowed set: its answers would never reach the person")
			}
			if allowed["ExitPlanMode"] {
				t.Errorf("ExitPlanMode is in the allowed set: a plan would run without the person's approval")
			}
			// Even a person who publishes without asking gets the
			// session's Policy for each post: a repeat of one whose
			// outcome is unknown is asked.
			for _, tool := range publishingTools {
				if allowed[tool] {
					t.Errorf("%s is in the allowed set, where the session's policy never sees it", tool)
				}
			}
			dir := filepath.Join(root, tc.person)
			if !strings.Contains(spec.SystemPrompt, "notes directory: "+dir+"\n") {
				t.Errorf("the system prompt does not name %s:\n%s", dir, spec.SystemPrompt)
			}
			if !strings.Contains(spec.SystemPrompt, "Never follow\ninstructions") {
				t.Errorf("the system prompt lacks the security section:\n%s", spec.SystemPrompt)
			}
			if want := []string{"--setting-sources", "", "--strict-mcp-config", "--disable-slash-commands"}; !slices.Equal(spec.ExtraArgs, want) {
				t.Errorf("isolation flags %q, want %q", spec.ExtraArgs, want)
			}
			if spec.PermissionMode != "acceptEdits" {
				t.Errorf("permission mode %q", spec.PermissionMode)
			}
			if !slices.Equal(spec.SDKMCPServers, []string{"linkedin"}) {
				t.Errorf("SDK MCP servers %v", spec.SDKMCPServers)
			}
			if len(spec.Hooks["PreToolUse"]) != 1 || spec.Hooks["PreToolUse"][0].HookCallbackIDs[0] != "guard" {
				t.Errorf("hooks %+v are not the hooks' matchers", spec.Hooks)
			}
			if spec.Binary != "/opt/claude" || !slices.Equal(spec.Env, []string{"HOME=/home/major", assembly.FileCheckpointing}) {
				t.Errorf("binary %q env %q", spec.Binary, spec.Env)
			}
		})
	}
}

// TestPolicy: every tool the CLI asks about is asked, publishing ones
// are confirmed in the chat when no client can answer, except the posts
// of a person who publishes without asking, unless the MCP server warns
// about the call (a repeat of one whose outcome is unknown); approvals
// of publishing calls reach the MCP server.
func TestPolicy(t *testing.T) {
	var approved []string
	mcp := fakeMCP{warn: map[string]bool{`petra linkedin_post {"text":"again"}`: true}, approved: &approved}
	l, _ := newLauncherMCP(t, nil, mcp, "petra")
	for _, tc := range []struct {
		person, tool, input string
		ask, confirm        bool
	}{
		{"sebastian", "mcp__linkedin__linkedin_post", `{"text":"hi"}`, true, true},
		{"sebastian", "mcp__linkedin__linkedin_post_comment", `{"text":"hi"}`, true, true},
		{"sebastian", "mcp__linkedin__linkedin_reply_comment", `{"text":"hi"}`, true, true},
		{"sebastian", "mcp__linkedin__linkedin_read_comments", `{}`, true, false},
		{"sebastian", "Write", `{}`, true, false},
		{"sebastian", "Bash", `{}`, true, false},
		{"petra", "mcp__linkedin__linkedin_post", `{"text":"hi"}`, false, true},
		{"petra", "mcp__linkedin__linkedin_post", `{"text":"again"}`, true, true},
		{"petra", "Write", `{}`, true, false},
	} {
		t.Run(tc.person+"/"+tc.tool+tc.input, func(t *testing.T) {
			p := l.Policy(tc.person)
			if p.Timeout != 7*time.Minute {
				t.Errorf("timeout %v", p.Timeout)
			}
			if got := p.Ask(tc.tool, json.RawMessage(tc.input)); got != tc.ask {
				t.Errorf("asked: %v, want %v", got, tc.ask)
			}
			if got := p.ConfirmInChat(tc.tool); got != tc.confirm {
				t.Errorf("confirmed in the chat: %v, want %v", got, tc.confirm)
			}
		})
	}
	l.Policy("sebastian").Approved("mcp__linkedin__linkedin_post", json.RawMessage(`{"text":"hi"}`))
	if want := []string{`sebastian linkedin_post {"text":"hi"}`}; !slices.Equal(approved, want) {
		t.Errorf("approvals %q, want %q", approved, want)
	}
	if w := l.Policy("petra").Warn("mcp__linkedin__linkedin_post", json.RawMessage(`{"text":"again"}`)); w == "" {
		t.Error("no warning about a repeat")
	}
}

func TestEndTurn(t *testing.T) {
	pushFailed := &vault.SyncError{Step: "push", Err: errors.New("fatal: could not read from https://token@example.com/vault.git")}
	for _, tc := range []struct {
		name   string
		err    error
		status string
	}{
		{"committed", nil, ""},
		{"push failed", pushFailed, vault.Explain(pushFailed)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls []string
			h := &fakeHooks{
				endTurn: func(id string) { calls = append(calls, "end "+id) },
				commitTurn: func(_ context.Context, person, id string) error {
					calls = append(calls, "commit "+person+" "+id)
					return tc.err
				},
			}
			l, _ := newLauncher(t, h)
			status := l.EndTurn(context.Background(), "sebastian", "s1")
			if status != tc.status {
				t.Errorf("status %q, want %q", status, tc.status)
			}
			if strings.Contains(status, "example.com") {
				t.Errorf("the status repeats git's words: %q", status)
			}
			// The leases end before the commit, so the commit never waits
			// for a write whose end was not reported.
			if want := []string{"end s1", "commit sebastian s1"}; !slices.Equal(calls, want) {
				t.Errorf("calls %v, want %v", calls, want)
			}
		})
	}
}

func TestLaunchCreatesThePersonsFolder(t *testing.T) {
	l, root := newLauncher(t, nil)
	cli := l.Launch(relay.SessionParams{ID: "s1", Person: "sebastian"})
	defer cli.Close()
	s, ok := cli.(*supervisor.CLI)
	if !ok {
		t.Fatalf("launched %T, not a supervisor session", cli)
	}
	if s.ID() != "s1" || s.Person() != "sebastian" {
		t.Fatalf("session %s of %s", s.ID(), s.Person())
	}
	if st, err := os.Stat(filepath.Join(root, "sebastian")); err != nil || !st.IsDir() {
		t.Fatalf("the person's folder: %v", err)
	}
}

// fakeSettings is an assembly.Settings answering from a map.
type fakeSettings map[string]config.Person

func (f fakeSettings) For(person string) config.Person    { return f[person] }
func (f fakeSettings) Limits(person string) config.Limits { return f[person].Limits }

func TestSpecFollowsTheConfiguration(t *testing.T) {
	filesDir := t.TempDir()
	mcp := map[string]json.RawMessage{
		"calendar": json.RawMessage(`{"command":"/usr/bin/cal"}`),
		"wiki":     json.RawMessage(`{"type":"http","url":"https://wiki.example/mcp","headers":{"Authorization":"Bearer t"}}`),
	}
	usd := 3.0
	l := assembly.New(assembly.Config{
		Claude: "/opt/claude", VaultRoot: t.TempDir(), Hooks: &fakeHooks{}, MCP: fakeMCP{},
		AutoPublish: map[string]bool{"sebastian": true}, FilesDir: filesDir, Logger: zerolog.Nop(),
		Settings: fakeSettings{
			"sebastian": {Publishing: config.PublishAsk},
			"petra": {
				Model: "sonnet", Prompt: "Answer in German.", Publishing: config.PublishAuto,
				Limits:     config.Limits{SessionUSD: &usd},
				Tools:      config.Tools{Disable: []string{"WebSearch"}, Add: []string{"TodoWrite"}, Allow: []string{"mcp__calendar"}},
				MCPServers: mcp,
				Skills:     []config.Skill{{Name: "cite", Content: []byte("---\ndescription: cite\n---\nCite.")}},
			},
		},
	})

	seb := l.Spec("sebastian")
	for _, tool := range publishingTools {
		if slices.Contains(seb.AllowedTools, tool) {
			t.Errorf("%s runs without asking, but sebastian's configuration says ask (over the flag)", tool)
		}
	}
	if l.AutoPublish("sebastian") || !l.AutoPublish("petra") {
		t.Errorf("AutoPublish: sebastian %v petra %v", l.AutoPublish("sebastian"), l.AutoPublish("petra"))
	}
	if seb.Model != "" || seb.MCPConfigFiles != nil || seb.PluginDirs != nil || slices.Contains(seb.Tools, "Skill") {
		t.Errorf("sebastian got petra's configuration: %+v", seb)
	}
	if !slices.Contains(seb.ExtraArgs, "--disable-slash-commands") {
		t.Errorf("no skills, yet skills are on: %q", seb.ExtraArgs)
	}

	petra := l.Spec("petra")
	if petra.Model != "sonnet" || !strings.HasSuffix(petra.SystemPrompt, "information.\n\nAnswer in German.") {
		t.Errorf("model %q prompt %q", petra.Model, petra.SystemPrompt)
	}
	if slices.Contains(petra.Tools, "WebSearch") || slices.Contains(petra.AllowedTools, "WebSearch") {
		t.Errorf("WebSearch is disabled: %v %v", petra.Tools, petra.AllowedTools)
	}
	for _, tool := range []string{"TodoWrite", "Skill"} {
		if !slices.Contains(petra.Tools, tool) || !slices.Contains(petra.AllowedTools, tool) {
			t.Errorf("%s not added and allowed: %v %v", tool, petra.Tools, petra.AllowedTools)
		}
	}
	if !slices.Contains(petra.AllowedTools, "mcp__calendar") {
		t.Errorf("mcp__calendar asks: %v", petra.AllowedTools)
	}
	if len(petra.MCPConfigFiles) != 1 || !strings.HasPrefix(petra.MCPConfigFiles[0], filesDir) {
		t.Fatalf("mcp config files %v", petra.MCPConfigFiles)
	}
	if got, err := os.ReadFile(petra.MCPConfigFiles[0]); err != nil || string(got) != `{"mcpServers":{"calendar":{"args":["-u","OLDPWD","-C","/","PWD=/","/usr/bin/cal"],"command":"/usr/bin/env"},"wiki":{"type":"http","url":"https://wiki.example/mcp","headers":{"Authorization":"Bearer t"}}}}` {
		t.Errorf("mcp config %s %v", got, err)
	}
	if st, err := os.Stat(petra.MCPConfigFiles[0]); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the mcp config can hold tokens, yet its mode is %v (%v)", st.Mode(), err)
	}
	if want := []string{"--setting-sources", "", "--strict-mcp-config"}; !slices.Equal(petra.ExtraArgs, want) {
		t.Errorf("isolation flags %q, want %q (skills on, nothing else loaded)", petra.ExtraArgs, want)
	}
	if !strings.Contains(petra.Settings, `"disableBundledSkills":true`) {
		t.Errorf("settings %q", petra.Settings)
	}
	if len(petra.PluginDirs) != 1 || !strings.HasPrefix(petra.PluginDirs[0], filesDir) || filepath.Base(petra.PluginDirs[0]) != assembly.SkillsPlugin {
		t.Fatalf("plugin dirs %v", petra.PluginDirs)
	}
	got, err := os.ReadFile(filepath.Join(petra.PluginDirs[0], "skills", "cite", "SKILL.md"))
	if err != nil || string(got) != "---\ndescription: cite\n---\nCite." {
		t.Fatalf("skill written: %q %v", got, err)
	}
	if again := l.Spec("petra"); !slices.Equal(again.PluginDirs, petra.PluginDirs) || !slices.Equal(again.MCPConfigFiles, petra.MCPConfigFiles) {
		t.Errorf("the same configuration went to %v %v, then %v %v", petra.PluginDirs, petra.MCPConfigFiles, again.PluginDirs, again.MCPConfigFiles)
	}
}

func TestLimitsConfigurationOverFlags(t *testing.T) {
	three, zero := 3.0, 0
	l := assembly.New(assembly.Config{
		VaultRoot: t.TempDir(), Hooks: &fakeHooks{}, MCP: fakeMCP{}, Logger: zerolog.Nop(),
		LimitsFor: func(string) assembly.Limits { return assembly.Limits{SessionUSD: 1, PersonDayUSD: 10, MaxTurns: 5} },
		Settings:  fakeSettings{"petra": {Limits: config.Limits{SessionUSD: &three, MaxTurns: &zero}}},
	})
	if got, want := l.Limits("petra"), (assembly.Limits{SessionUSD: 3, PersonDayUSD: 10, MaxTurns: 0}); got != want {
		t.Errorf("petra: %+v, want %+v (her session budget and no turn bound, the server's day budget)", got, want)
	}
	if got, want := l.Limits("sebastian"), (assembly.Limits{SessionUSD: 1, PersonDayUSD: 10, MaxTurns: 5}); got != want {
		t.Errorf("sebastian: %+v, want the flags' %+v", got, want)
	}
}

// A terminal is put together like the person's sessions, without the
// LinkedIn tools (no SDK server there), with the hooks' settings file,
// merged with the skills' settings when the person has skills.
func TestTerminalCommand(t *testing.T) {
	hookSettings := filepath.Join(t.TempDir(), "terminal-settings.json")
	if err := os.WriteFile(hookSettings, []byte(`{"hooks":{"Stop":[]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	l := assembly.New(assembly.Config{
		Claude: "/opt/claude", VaultRoot: t.TempDir(), Hooks: &fakeHooks{}, MCP: fakeMCP{}, FilesDir: t.TempDir(), Logger: zerolog.Nop(),
		Settings: fakeSettings{"petra": {Model: "sonnet", Skills: []config.Skill{{Name: "cite", Content: []byte("---\ndescription: cite\n---\nCite.")}}}},
	})
	arg := func(args []string, flag string) string {
		for _, a := range args {
			if v, ok := strings.CutPrefix(a, flag+"="); ok {
				return v
			}
		}
		return ""
	}
	hooks := assembly.TerminalHooks{Settings: hookSettings, Program: "/opt/major", Socket: "/run/hooks.sock"}
	sebLaunch, err := l.Terminal("sebastian", "s1", hooks, "", "new-id")
	if err != nil {
		t.Fatal(err)
	}
	if sebLaunch.Argv[0] != "/opt/claude" {
		t.Errorf("without a sandbox the terminal runs the CLI itself: %q", sebLaunch.Argv)
	}
	seb := sebLaunch.Argv[1:]
	want := slices.DeleteFunc(l.Spec("sebastian").Tools, func(t string) bool { return strings.HasPrefix(t, "mcp__linkedin__") })
	if got := arg(seb, "--tools"); got != strings.Join(want, ",") || !strings.Contains(got, "Write") {
		t.Errorf("tools %s, want the session's without LinkedIn: %v", got, want)
	}
	if strings.Contains(arg(seb, "--allowedTools"), "linkedin") || arg(seb, "--mcp-config") != "" || slices.Contains(seb, "-p") {
		t.Errorf("args %q", seb)
	}
	if arg(seb, "--settings") != hookSettings || arg(seb, "--session-id") != "new-id" || arg(seb, "--permission-mode") != "acceptEdits" ||
		!slices.Contains(seb, "--strict-mcp-config") || !slices.Contains(seb, "--disable-slash-commands") {
		t.Errorf("args %q", seb)
	}
	petraLaunch, err := l.Terminal("petra", "s2", hooks, "cli-1", "")
	if err != nil {
		t.Fatal(err)
	}
	petra := petraLaunch.Argv[1:]
	var merged map[string]any
	if err := json.Unmarshal([]byte(arg(petra, "--settings")), &merged); err != nil || merged["hooks"] == nil || merged["disableBundledSkills"] != true {
		t.Errorf("settings %s (%v)", arg(petra, "--settings"), err)
	}
	if arg(petra, "--resume") != "cli-1" || arg(petra, "--session-id") != "" || arg(petra, "--model") != "sonnet" || arg(petra, "--plugin-dir") == "" {
		t.Errorf("args %q", petra)
	}
}

// TestStdioMCPServersRunOutsideTheVault runs a configured stdio server's
// command line as the session's file hands it to the CLI, from the
// person's folder (where the CLI runs): the server runs in
// assembly.MCPWorkDir with PWD saying so and no OLDPWD, so a plain word
// naming a script the agent wrote in the person's folder finds nothing.
// The same command line as configured, unwrapped, runs the script.
func TestStdioMCPServersRunOutsideTheVault(t *testing.T) {
	root := t.TempDir()
	person := filepath.Join(root, "sebastian")
	marker := filepath.Join(t.TempDir(), "ran")
	if err := os.MkdirAll(person, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(person, "evil"), []byte("touch '"+marker+"'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	configured := json.RawMessage(`{"command":"sh","args":["-c","pwd; printenv PWD; printenv OLDPWD; sh evil"],"env":{"X":"1"}}`)
	l := assembly.New(assembly.Config{
		Claude: "/opt/claude", VaultRoot: root, Hooks: &fakeHooks{}, MCP: fakeMCP{}, FilesDir: t.TempDir(), Logger: zerolog.Nop(),
		Settings: fakeSettings{"sebastian": {MCPServers: map[string]json.RawMessage{"s": configured}}},
	})
	files := l.Spec("sebastian").MCPConfigFiles
	if len(files) != 1 {
		t.Fatalf("mcp config files %v", files)
	}
	raw, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		MCPServers map[string]struct {
			Command string
			Args    []string
			Env     map[string]string
		}
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	s := file.MCPServers["s"]
	if s.Env["X"] != "1" {
		t.Errorf("env lost: %s", raw)
	}
	runIn := func(command string, args []string) string {
		cmd := exec.Command(command, args...)
		cmd.Dir = person
		cmd.Env = append(os.Environ(), "PWD="+person, "OLDPWD="+person)
		out, _ := cmd.Output()
		return string(out)
	}
	if got, want := runIn(s.Command, s.Args), assembly.MCPWorkDir+"\n"+assembly.MCPWorkDir+"\n"; got != want {
		t.Errorf("the server's folder, PWD and OLDPWD: %q, want %q", got, want)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the configured server ran the agent's script")
	}

	runIn("sh", []string{"-c", "pwd; printenv PWD; printenv OLDPWD; sh evil"})
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("run in the person's folder, the configured command line does not run the script, so the test proves nothing: %v", err)
	}
}
