package hooks_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/clitest"
	"github.com/majorhq/major/hooks"
	"github.com/majorhq/major/supervisor"
)

// A skill of the owner's configuration that embeds a shell command
// (a "!`...`" line, run by the CLI as the skill loads, outside every
// tool) never runs it: the server's PreSkillShellCommand hook denies it
// before the CLI would ask for Bash (a permission a person could grant),
// in the sandbox, as the server runs the CLI. The sessions here even
// have Bash (the server's never do, which alone keeps the command from
// running today): the hook holds whatever the tool set. Without it the
// very same skill runs its command once the person allows it, so the
// plant is real.
func TestSkillShellCommandsAreDenied(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		hooked bool
	}{
		{"with the server's hooks", true},
		{"without a PreSkillShellCommand hook", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := clitest.New(t, nil)
			h := newHooks(t, env.VaultRoot, nil)
			// The plugin sits in the CLI's home, which its sandbox holds.
			plugin := filepath.Join(env.Home, "skills-plugin", "major")
			writeFile(t, filepath.Join(plugin, ".claude-plugin", "plugin.json"), `{"name":"major"}`)
			writeFile(t, filepath.Join(plugin, "skills", "today", "SKILL.md"),
				"---\nname: today\ndescription: TODAY-SKILL tells the date\n---\nThe shell says: !`touch skill-shell-ran && echo SHELL-OUTPUT`\n")
			matchers := h.Matchers()
			if !tc.hooked {
				delete(matchers, "PreSkillShellCommand")
			}
			var mu sync.Mutex
			var asked []supervisor.HookInput
			handle := func(ctx context.Context, c hooks.Caller, req *supervisor.ControlRequest) (json.RawMessage, error) {
				var in supervisor.HookInput
				_ = json.Unmarshal(req.HookInput, &in)
				if in.HookEventName == "PreSkillShellCommand" {
					mu.Lock()
					asked = append(asked, in)
					mu.Unlock()
				}
				return h.Handle(ctx, c, req)
			}
			var prompts []string
			allow := func(ctx context.Context, req *supervisor.ControlRequest) (supervisor.PermissionResult, error) {
				mu.Lock()
				prompts = append(prompts, req.ToolName)
				mu.Unlock()
				return supervisor.PermissionResult{Allow: true, UpdatedInput: req.Input}, nil
			}
			rec := clitest.NewRecorder()
			s := supervisor.NewCLI(supervisor.CLIConfig{
				ID: "skill", Person: "sebastian", Dir: env.Vault("sebastian"),
				Spec: supervisor.Spec{
					Binary: env.Binary, Sandbox: env.Sandbox(t, "sebastian"), Env: env.ChildEnv(),
					Tools: []string{"Read", "Skill", "Bash"}, AllowedTools: []string{"Skill"}, PermissionMode: "acceptEdits",
					Hooks: matchers, PluginDirs: []string{plugin},
					ExtraArgs: []string{"--setting-sources", "", "--strict-mcp-config"},
				},
				Handlers: func(s *supervisor.CLI) supervisor.Handlers {
					return supervisor.Handlers{CanUseTool: allow, HookCallback: func(ctx context.Context, req *supervisor.ControlRequest) (json.RawMessage, error) {
						return handle(ctx, s, req)
					}}
				},
				Sink: rec, Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel),
			})
			t.Cleanup(func() { _ = s.Close() })
			got := rec.Turn(t, s, `[[tool Skill {"skill":"major:today"}]]`)

			_, err := os.Stat(filepath.Join(env.Vault("sebastian"), "skill-shell-ran"))
			ran := err == nil
			mu.Lock()
			defer mu.Unlock()
			if !tc.hooked {
				if !ran || !strings.Contains(got, "The shell says: SHELL-OUTPUT") {
					t.Fatalf("without the hook the skill's shell command did not run (the test proves nothing): %q", got)
				}
				return
			}
			if ran || strings.Contains(got, "The shell says: SHELL-OUTPUT") || len(prompts) != 0 {
				t.Fatalf("the skill's shell command ran or was asked about (%v): %q", prompts, got)
			}
			if len(asked) != 1 || !strings.Contains(string(asked[0].ToolInput), "touch skill-shell-ran") {
				t.Fatalf("the hook was asked %d times: %+v", len(asked), asked)
			}
		})
	}
}
