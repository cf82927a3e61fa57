package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
	mcpgo "github.com/mark3labs/mcp-go/server"
)

// probeEnv makes this test binary, started by the CLI as an MCP server,
// serve the probe (see TestMain) instead of running tests.
const probeEnv = "PROBE_MCP_SERVER"

// serveProbe is a stdio MCP server with one tool, whereami, which answers
// with the folder it was started in.
func serveProbe() error {
	s := mcpgo.NewMCPServer("probe", "1.0.0", mcpgo.WithToolCapabilities(false))
	s.AddTool(mcp.NewTool("whereami", mcp.WithDescription("Where the probe runs")),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			wd, err := os.Getwd()
			if err != nil {
				return nil, err
			}
			return mcp.NewToolResultText("PROBE-CWD " + wd), nil
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
//     sessions only, the MCP server runs in the person's folder, the skill
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
		// The person's folder, as clients see it: "." (the server's
		// paths never reach them).
		if want := "PROBE-CWD ."; !strings.Contains(got, want) {
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
