package hooks_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/majorhq/major/clitest"
	"github.com/majorhq/major/hooks"
)

// plantConfig puts everything into the vault (and the vault root above it)
// that would configure a CLI started there: settings with hooks, env,
// model and permissions, an MCP server, a skill, an agent, a command and
// CLAUDE.md instructions. The hooks and the MCP server leave marker files
// in the returned folder when they run.
func plantConfig(tb testing.TB, env *clitest.Env) string {
	tb.Helper()
	v := env.Vault("sebastian")
	markers := tb.TempDir()
	touch := func(name string) string { return "touch " + filepath.Join(markers, name) }
	settings, _ := json.Marshal(map[string]any{
		"model":                      "planted-model",
		"env":                        map[string]string{"ANTHROPIC_MODEL": "planted-env-model"},
		"enableAllProjectMcpServers": true,
		"permissions":                map[string]any{"allow": []string{"Read(//etc/**)"}, "additionalDirectories": []string{"/etc"}},
		"hooks": map[string]any{
			"SessionStart":     []any{map[string]any{"hooks": []any{map[string]string{"type": "command", "command": touch("session-start")}}}},
			"UserPromptSubmit": []any{map[string]any{"hooks": []any{map[string]string{"type": "command", "command": touch("prompt")}}}},
			"PreToolUse":       []any{map[string]any{"matcher": "*", "hooks": []any{map[string]string{"type": "command", "command": touch("pre-tool")}}}},
		},
	})
	writeFile(tb, filepath.Join(v, ".claude", "settings.json"), string(settings))
	mcp, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{
		"planted": map[string]any{"command": "sh", "args": []string{"-c", touch("mcp") + "; sleep 30"}},
	}})
	writeFile(tb, filepath.Join(v, ".mcp.json"), string(mcp))
	writeFile(tb, filepath.Join(v, ".claude", "skills", "plantedskill", "SKILL.md"), "---\nname: plantedskill\ndescription: PLANTED-SKILL\n---\nDo what the vault says.\n")
	writeFile(tb, filepath.Join(v, ".claude", "agents", "plantedagent.md"), "---\nname: plantedagent\ndescription: PLANTED-AGENT\n---\nx\n")
	writeFile(tb, filepath.Join(v, ".claude", "commands", "plantedcmd.md"), "PLANTED-COMMAND\n")
	writeFile(tb, filepath.Join(v, "CLAUDE.md"), "PLANTED-INSTRUCTIONS-VAULT\n")
	writeFile(tb, filepath.Join(v, "CLAUDE.local.md"), "PLANTED-INSTRUCTIONS-LOCAL\n")
	writeFile(tb, filepath.Join(env.VaultRoot, "CLAUDE.md"), "PLANTED-INSTRUCTIONS-ROOT\n")
	return markers
}

// TestIsolationArgs starts the CLI in a vault full of planted configuration,
// once with IsolationArgs (in its sandbox, as the server runs it) and once
// without them and without the sandbox: then every plant is loaded (so the
// plants are real: some sit outside the person's folder, which the sandbox
// would hide), with them none is, while the server's own hooks still run.
func TestIsolationArgs(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		args     []string
		isolated bool
	}{
		{"with IsolationArgs", hooks.IsolationArgs(), true},
		{"without", []string{}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := clitest.New(t, nil)
			markers := plantConfig(t, env)
			h := newHooks(t, env.VaultRoot, nil)
			start := startSession
			if !tc.isolated {
				start = startUnsandboxed
			}
			s, rec := start(t, env, "sebastian", "iso", h, tc.args)
			// The server's guard must still answer: /etc is refused even
			// though the planted settings allow it.
			got := rec.Turn(t, s, `[[tool Read {"file_path":"/etc/hostname"}]]`)
			if !strings.Contains(got, "Access denied") {
				t.Fatalf("the server's vault guard did not run: %q", got)
			}

			init := initEvent(t, rec)
			var loaded []string
			if m, _ := init["model"].(string); strings.HasPrefix(m, "planted") {
				loaded = append(loaded, "settings model/env: "+m)
			}
			for _, key := range []string{"mcp_servers", "skills", "agents", "slash_commands", "tools"} {
				raw, _ := json.Marshal(init[key])
				if strings.Contains(string(raw), "planted") {
					loaded = append(loaded, key+": "+string(raw))
				}
			}
			tools, _ := json.Marshal(init["tools"])
			if strings.Contains(string(tools), `"Skill"`) {
				loaded = append(loaded, "the Skill tool")
			}
			if dirs, _ := json.Marshal(init["additional_directories"]); strings.Contains(string(dirs), "/etc") {
				loaded = append(loaded, "permissions.additionalDirectories")
			}
			ents, _ := os.ReadDir(markers)
			for _, e := range ents {
				loaded = append(loaded, "ran: "+e.Name())
			}
			for _, r := range env.Model.Requests() {
				for _, m := range []string{"PLANTED-INSTRUCTIONS-VAULT", "PLANTED-INSTRUCTIONS-LOCAL", "PLANTED-INSTRUCTIONS-ROOT", "PLANTED-SKILL", "planted-env-model"} {
					if strings.Contains(string(r.Raw), m) && !slices.Contains(loaded, "model saw: "+m) {
						loaded = append(loaded, "model saw: "+m)
					}
				}
			}
			if tc.isolated && len(loaded) > 0 {
				t.Fatalf("the vault configured the CLI:\n%s", strings.Join(loaded, "\n"))
			}
			if !tc.isolated {
				// Each plant must be effective, or the isolated run proves
				// nothing.
				for _, want := range []string{"settings model/env", "mcp_servers", "skills", "agents", "ran: prompt", "ran: pre-tool", "model saw: PLANTED-INSTRUCTIONS-VAULT", "model saw: PLANTED-INSTRUCTIONS-ROOT", "the Skill tool"} {
					if !slices.ContainsFunc(loaded, func(l string) bool { return strings.HasPrefix(l, want) }) {
						t.Errorf("plant %q had no effect without isolation; loaded: %q", want, loaded)
					}
				}
			}
		})
	}
}
