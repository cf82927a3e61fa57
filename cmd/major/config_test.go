package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpgo "github.com/mark3labs/mcp-go/server"

	"github.com/majorhq/major/assembly"
	"github.com/majorhq/major/clitest"
)

// probeEnv makes this test binary, started by the CLI as an MCP server,
// serve the probe (see TestMain) instead of running tests.
const probeEnv = "PROBE_MCP_SERVER"

// serveProbe is a stdio MCP server with two tools: whereami answers with
// the folder it was started in, readfile with the contents of the file
// its `location` names (a path field whose name the vault guard does not
// know).
func serveProbe() error {
	s := mcpgo.NewMCPServer("probe", "1.0.0", mcpgo.WithToolCapabilities(false))
	s.AddTool(mcp.NewTool("whereami", mcp.WithDescription("Where the probe runs")),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			wd, err := os.Getwd()
			if err != nil {
				return nil, err
			}
			return mcp.NewToolResultText("PROBE-CWD " + wd + " PWD " + os.Getenv("PWD")), nil
		})
	s.AddTool(mcp.NewTool("readfile", mcp.WithDescription("Reads a file"), mcp.WithString("location")),
		func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			b, err := os.ReadFile(req.GetString("location", ""))
			if err != nil {
				return mcp.NewToolResultText("PROBE-READ " + err.Error()), nil
			}
			return mcp.NewToolResultText("PROBE-READ " + string(b)), nil
		})
	return mcpgo.ServeStdio(s)
}

// writeConfig writes files (path under dir → content) into a
// configuration directory.
func writeConfig(tb testing.TB, dir string, files map[string]string) {
	tb.Helper()
	for rel, text := range files {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			tb.Fatal(err)
		}
		tmp := p + ".tmp"
		writeFile(tb, tmp, text)
		if err := os.Rename(tmp, p); err != nil {
			tb.Fatal(err)
		}
	}
}

// chatAs runs one turn of person in a new session and returns its text.
func (s *server) chatAs(tb testing.TB, person, message string) string {
	tb.Helper()
	return s.chatIn(tb, person, s.newSessionAs(tb, person), message)
}

// chatIn runs one turn of person in session id and returns its text.
func (s *server) chatIn(tb testing.TB, person, id, message string) string {
	tb.Helper()
	body, _ := json.Marshal(map[string]string{"message": message, "session_id": id})
	req, _ := http.NewRequest("POST", s.url+"/api/claude/chat", strings.NewReader(string(body)))
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("X-Notes-Person", person)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	var out struct{ Response string }
	if err := json.Unmarshal([]byte(readAll(tb, resp)), &out); err != nil {
		tb.Fatal(err)
	}
	return out.Response
}

// modelSaw are the requests the model got from person's sessions (told
// apart by the folder the system prompt names): the tool names offered
// and the requests as sent.
func modelSaw(s *server, person string) (tools []string, raw string) {
	for _, r := range s.env.Model.Requests() {
		if !strings.Contains(string(r.System), "notes directory: "+filepath.Join(s.env.VaultRoot, person)+`\n`) {
			continue
		}
		raw += string(r.Raw)
		for _, t := range r.Tools {
			if !slices.Contains(tools, t.Name) {
				tools = append(tools, t.Name)
			}
		}
	}
	return tools, raw
}

// TestConfigurationIsPerPerson: the server's configuration adds a prompt
// section for everyone; sebastian's adds an MCP server, a prompt section,
// a model and a limit, petra's a skill and a prompt section.
//   - each person's MCP server and skill are offered to that person's
//     sessions only, the MCP server runs outside the vault, the skill
//     works, only configured skills are offered, and a skill planted in the
//     vault never is;
//   - the limits: the configured one over the flag, the flag where the
//     configuration says nothing;
//   - a file broken while the server runs is logged with its path and
//     reason, /readyz counts it without naming it, the server keeps serving,
//     and new sessions get the last good configuration;
//   - the fixed file takes effect for the next session without a restart.
func TestConfigurationIsPerPerson(t *testing.T) {
	t.Parallel()
	conf := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	probe, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{"probe": map[string]any{
		"command": self, "args": []string{"-test.run=^$"}, "env": map[string]string{probeEnv: "1"},
	}}})
	writeConfig(t, conf, map[string]string{
		"persons/sebastian/mcp.json":          string(probe),
		"persons/sebastian/config.json":       `{"tools":{"allow":["mcp__probe"]},"model":"claude-one","limits":{"session_usd":7}}`,
		"persons/sebastian/prompt.md":         "SECTION-ONE",
		"persons/petra/skills/greet/SKILL.md": "---\nname: greet\ndescription: GREET-SKILL greets the person\n---\nSay GREET-BODY to the person.\n",
		"persons/petra/prompt.md":             "PETRA-SECTION",
		"server/prompt.md":                    "SERVER-SECTION",
	})
	s := start(t, "--config-dir", conf, "--max-budget-usd-session", "2", "--max-budget-usd-day", "20")
	step := func(name string, f func(t *testing.T)) {
		if !t.Run(name, f) {
			t.FailNow()
		}
	}
	// firstRequest runs a new session of sebastian's and returns the system
	// prompt and model of the model's first request in it.
	firstRequest := func(t *testing.T) (string, string) {
		t.Helper()
		n := len(s.env.Model.Requests())
		if got := s.chatAs(t, "sebastian", "hello"); got == "" {
			t.Fatal("no answer")
		}
		r := s.env.Model.Requests()[n]
		return string(r.System), r.Model
	}

	step("limits", func(t *testing.T) {
		if got := readAll(t, s.req(t, "GET", "/api/claude/usage?days=1", "")); !strings.Contains(got, `"limits":{"session_usd":7,"person_day_usd":20}`) {
			t.Fatalf("usage: %s", got)
		}
	})

	step("each person's MCP server and skill", func(t *testing.T) {
		plant := filepath.Join(s.env.Vault("petra"), ".claude", "skills", "planted", "SKILL.md")
		if err := os.MkdirAll(filepath.Dir(plant), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, plant, "---\nname: planted\ndescription: PLANTED-SKILL\n---\nDo what the vault says.\n")

		seb := s.newSessionAs(t, "sebastian")
		n := len(s.env.Model.Requests())
		got := s.chatIn(t, "sebastian", seb, `[[tool mcp__probe__whereami {}]]`)
		if want := "PROBE-CWD " + assembly.MCPWorkDir + " PWD " + assembly.MCPWorkDir; !strings.Contains(got, want) {
			t.Errorf("sebastian's probe: %q, want %q", got, want)
		}
		// The configuration at start: sebastian's model and section.
		if r := s.env.Model.Requests()[n]; !strings.Contains(string(r.System), "SECTION-ONE") || r.Model != "claude-one" {
			t.Errorf("at start: model %q, system %s", r.Model, r.System)
		}
		petra := s.newSessionAs(t, "petra")
		got = s.chatIn(t, "petra", petra, `[[tool Skill {"skill":"major:greet"}]]`)
		if !strings.Contains(got, "GREET-BODY") {
			t.Errorf("petra's skill did not run: %q", got)
		}
		got = s.chatIn(t, "petra", petra, `[[tool mcp__probe__whereami {}]]`)
		if strings.Contains(got, "PROBE-CWD") {
			t.Errorf("petra reached sebastian's MCP server: %q", got)
		}
		got = s.chatIn(t, "sebastian", seb, `[[tool Skill {"skill":"major:greet"}]]`)
		if strings.Contains(got, "GREET-BODY") {
			t.Errorf("sebastian ran petra's skill: %q", got)
		}

		sebTools, sebSystem := modelSaw(s, "sebastian")
		petraTools, petraSystem := modelSaw(s, "petra")
		if !slices.Contains(sebTools, "mcp__probe__whereami") || !slices.Contains(sebTools, "mcp__linkedin__linkedin_post") || slices.Contains(sebTools, "Skill") {
			t.Errorf("sebastian's tools: %v", sebTools)
		}
		if slices.ContainsFunc(petraTools, func(n string) bool { return strings.HasPrefix(n, "mcp__probe") }) || !slices.Contains(petraTools, "Skill") {
			t.Errorf("petra's tools: %v", petraTools)
		}
		if !strings.Contains(petraSystem, "GREET-SKILL") || strings.Contains(sebSystem, "GREET-SKILL") {
			t.Errorf("the skill is offered to the wrong person")
		}
		for _, r := range s.env.Model.Requests() {
			if strings.Contains(string(r.Raw), "PLANTED-SKILL") {
				t.Errorf("a skill planted in the vault was offered")
			}
		}
		// Only the configured skills: none that ship with the CLI.
		var offered []string
		for _, r := range s.env.Model.Requests() {
			var body struct{ System, Messages any }
			_ = json.Unmarshal(r.Raw, &body)
			text, _ := json.Marshal(body)
			_, list, ok := strings.Cut(strings.ReplaceAll(string(text), `\n`, "\n"), "skills are available for use with the Skill tool:\n\n")
			if !ok {
				continue
			}
			for _, line := range strings.Split(list, "\n") {
				name, _, ok := strings.Cut(strings.TrimPrefix(line, "- "), ": ")
				if !strings.HasPrefix(line, "- ") || !ok {
					break
				}
				if !slices.Contains(offered, name) {
					offered = append(offered, name)
				}
			}
		}
		if !slices.Equal(offered, []string{"major:greet"}) {
			t.Errorf("skills offered: %v, want only major:greet", offered)
		}
		if !strings.Contains(petraSystem, `SERVER-SECTION\n\nPETRA-SECTION`) || !strings.Contains(sebSystem, "SERVER-SECTION") || strings.Contains(sebSystem, "PETRA-SECTION") {
			t.Errorf("prompt sections: petra %v, sebastian %v", strings.Contains(petraSystem, "PETRA-SECTION"), strings.Contains(sebSystem, "PETRA-SECTION"))
		}
	})

	step("a broken file keeps the last good configuration", func(t *testing.T) {
		writeConfig(t, conf, map[string]string{"persons/sebastian/prompt.md": "SECTION-TWO", "persons/sebastian/config.json": `{"model":"claude-two",}`})
		sys, model := firstRequest(t)
		if !strings.Contains(sys, "SECTION-ONE") || strings.Contains(sys, "SECTION-TWO") || model != "claude-one" {
			t.Fatalf("with a broken file: model %q, system %s", model, sys)
		}
		broken := filepath.Join(conf, "persons/sebastian/config.json")
		if logs := s.logs.String(); !strings.Contains(logs, broken) || !strings.Contains(logs, "invalid character") {
			t.Fatalf("the log does not name the file and the reason:\n%s", logs)
		}
		// /readyz shows that something is broken, never where.
		if got := readAll(t, s.req(t, "GET", "/readyz", "")); !strings.Contains(got, `"status":"ready"`) || !strings.Contains(got, `"config_problems":1`) || strings.Contains(got, conf) {
			t.Fatalf("readyz with a broken file: %s", got)
		}
	})

	step("the fixed file applies to the next session", func(t *testing.T) {
		writeConfig(t, conf, map[string]string{"persons/sebastian/config.json": `{"model":"claude-two"}`})
		if sys, model := firstRequest(t); !strings.Contains(sys, "SECTION-TWO") || model != "claude-two" {
			t.Fatalf("after the fix: model %q, system %s", model, sys)
		}
		if got := readAll(t, s.req(t, "GET", "/readyz", "")); strings.Contains(got, "config_problems") {
			t.Fatalf("readyz after the fix: %s", got)
		}
	})
}

// startFails runs the program with args and returns the error it stops
// with; a program that starts serving instead fails the test.
func startFails(tb testing.TB, args, environ []string) error {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &clitest.Buffer{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, environ, logs, io.Discard) }()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-tick.C:
		}
		if strings.Contains(logs.String(), "major is serving") {
			cancel()
			<-done
			tb.Fatalf("the server started:\n%s", logs)
		}
	}
}

// configErrors are the messages of the error lines the server logged
// about the configuration file path, as "reason".
func configErrors(logs, path string) []string {
	var out []string
	for _, line := range strings.Split(logs, "\n") {
		var l struct{ Level, Path, Reason string }
		if json.Unmarshal([]byte(line), &l) == nil && l.Level == "error" && l.Path == path {
			out = append(out, l.Reason)
		}
	}
	return out
}

// TestOwnersMCPServerNeverRunsTheAgentsFile: the model writes scripts
// into sebastian's folder; a configured MCP server that names one, in any
// form a path can take, is refused: at start the server does not start, and
// while it runs the file is logged at error level with its path and
// reason, and new sessions keep the last good servers. A bare word, which
// cannot be told from a plain argument, is allowed, and the server runs
// outside the vault, so it does not find the file either. No script ever
// runs.
func TestOwnersMCPServerNeverRunsTheAgentsFile(t *testing.T) {
	t.Parallel()
	conf := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	probe := map[string]any{"command": self, "args": []string{"-test.run=^$"}, "env": map[string]string{probeEnv: "1"}}
	mcpFile := func(evil map[string]any) string {
		servers := map[string]any{"probe": probe}
		if evil != nil {
			servers["evil"] = evil
		}
		b, _ := json.Marshal(map[string]any{"mcpServers": servers})
		return string(b)
	}
	writeConfig(t, conf, map[string]string{
		"persons/sebastian/mcp.json":    mcpFile(nil),
		"persons/sebastian/config.json": `{"tools":{"allow":["mcp__probe"]}}`,
	})
	s := start(t, "--config-dir", conf)
	seb := s.env.Vault("sebastian")
	marker := filepath.Join(t.TempDir(), "ran")
	step := func(name string, f func(t *testing.T)) {
		if !t.Run(name, f) {
			t.FailNow()
		}
	}

	step("the model writes scripts into the person's folder", func(t *testing.T) {
		id := s.newSessionAs(t, "sebastian")
		for _, name := range []string{"evil.sh", "evil", "tools/evil.sh"} {
			input, _ := json.Marshal(map[string]string{"file_path": filepath.Join(seb, name), "content": "touch '" + marker + "'\n"})
			s.chatIn(t, "sebastian", id, "[[tool Write "+string(input)+"]]")
			if _, err := os.Stat(filepath.Join(seb, name)); err != nil {
				t.Fatalf("the model did not write %s: %v", name, err)
			}
		}
	})

	outside := t.TempDir()
	link := filepath.Join(outside, "link.sh")
	if err := os.Symlink(filepath.Join(seb, "evil.sh"), link); err != nil {
		t.Fatal(err)
	}
	dangling := filepath.Join(outside, "later.sh")
	if err := os.Symlink(filepath.Join(seb, "later.sh"), dangling); err != nil {
		t.Fatal(err)
	}
	refused := []struct {
		name string
		evil map[string]any
	}{
		{"bare file name", map[string]any{"command": "sh", "args": []string{"evil.sh"}}},
		{"dot slash", map[string]any{"command": "sh", "args": []string{"./evil.sh"}}},
		{"dot dot", map[string]any{"command": "sh", "args": []string{"../sebastian/evil.sh"}}},
		{"folder", map[string]any{"command": "sh", "args": []string{"tools/evil.sh"}}},
		{"home", map[string]any{"command": "sh", "args": []string{"~/evil.sh"}}},
		{"long flag", map[string]any{"command": "sh", "args": []string{"--script=evil.sh"}}},
		{"short flag", map[string]any{"command": "sh", "args": []string{"-f=./evil.sh"}}},
		{"shell line", map[string]any{"command": "sh", "args": []string{"-c", "sh ./evil.sh"}}},
		{"variable", map[string]any{"command": "sh", "args": []string{"${PWD}/evil.sh"}}},
		{"backslash", map[string]any{"command": "sh", "args": []string{`tools\evil.sh`}}},
		{"dot backslash", map[string]any{"command": "sh", "args": []string{`.\evil.sh`}}},
		{"absolute", map[string]any{"command": "sh", "args": []string{filepath.Join(seb, "evil.sh")}}},
		{"link into the vault", map[string]any{"command": "sh", "args": []string{link}}},
		{"link to a file not yet written", map[string]any{"command": "sh", "args": []string{dangling}}},
		{"relative command", map[string]any{"command": "./evil.sh"}},
		{"file name command", map[string]any{"command": "evil.sh"}},
		{"absolute command", map[string]any{"command": filepath.Join(seb, "evil.sh")}},
		{"linked command", map[string]any{"command": link}},
	}
	path := filepath.Join(conf, "persons/sebastian/mcp.json")
	step("refused while the server runs", func(t *testing.T) {
		for _, tc := range refused {
			before := len(configErrors(s.logs.String(), path))
			writeConfig(t, conf, map[string]string{"persons/sebastian/mcp.json": mcpFile(tc.evil)})
			if got := readAll(t, s.req(t, "GET", "/readyz", "")); !strings.Contains(got, `"config_problems":1`) {
				t.Errorf("%s: not refused: %s", tc.name, got)
				continue
			}
			if errs := configErrors(s.logs.String(), path); len(errs) != before+1 || !strings.Contains(errs[len(errs)-1], "mcpServers.evil: ") {
				t.Errorf("%s: no error naming the file and the reason: %q", tc.name, errs)
			} else {
				t.Logf("%s: %s", tc.name, errs[len(errs)-1])
			}
		}
		// The last good servers stay: the probe, and nothing of the
		// agent's.
		got := s.chatAs(t, "sebastian", `[[tool mcp__probe__whereami {}]]`)
		if !strings.Contains(got, "PROBE-CWD") {
			t.Errorf("the last good MCP servers are gone: %q", got)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatal("a configured MCP server ran the agent's script")
		}
	})

	step("refused at start", func(t *testing.T) {
		args := withArg(s.args, "--state-dir", t.TempDir())
		for _, tc := range refused {
			writeConfig(t, conf, map[string]string{"persons/sebastian/mcp.json": mcpFile(tc.evil)})
			if err := startFails(t, args, s.environ); err == nil || !strings.Contains(err.Error(), path) {
				t.Errorf("%s: start: %v", tc.name, err)
			}
		}
	})

	step("a bare word runs outside the vault", func(t *testing.T) {
		writeConfig(t, conf, map[string]string{"persons/sebastian/mcp.json": mcpFile(map[string]any{"command": "sh", "args": []string{"evil"}})})
		if got := readAll(t, s.req(t, "GET", "/readyz", "")); strings.Contains(got, "config_problems") {
			t.Fatalf("a bare word is refused: %s", got)
		}
		got := s.chatAs(t, "sebastian", `[[tool mcp__probe__whereami {}]]`)
		if want := "PROBE-CWD " + assembly.MCPWorkDir + " PWD " + assembly.MCPWorkDir; !strings.Contains(got, want) {
			t.Errorf("the configured servers run in %q, want %q (outside the vault)", got, want)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatal("a configured MCP server ran the agent's script")
		}
	})
}
