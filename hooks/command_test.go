package hooks_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/hooks"
)

// A terminal's hook commands reach the server's own Handle through the
// socket: the vault guard denies a path outside the person's folder and
// allows one inside, an unknown token is denied, and Stop ends the turn.
func TestHookCommandsAskTheServer(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "sebastian"), 0o755); err != nil {
		t.Fatal(err)
	}
	h := hooks.New(hooks.Config{VaultRoot: root, Logger: zerolog.Nop()})
	ended := make(chan string, 1)
	cmds, err := hooks.ListenCommands(hooks.CommandConfig{
		Socket: filepath.Join(t.TempDir(), "hooks.sock"),
		Handle: h.Handle,
		TurnEnd: func(_ context.Context, person, id string) string {
			ended <- person + "/" + id
			return ""
		},
		Logger: zerolog.Nop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cmds.Close()
	caller := newCaller("s1", "sebastian")
	token, unregister := cmds.Register(caller)

	run := func(token, id, input string) string {
		t.Helper()
		env := map[string]string{hooks.SocketEnv: cmds.Socket(), hooks.TokenEnv: token}
		var out, errOut bytes.Buffer
		err := hooks.RunCommand(context.Background(), []string{id}, func(k string) string { return env[k] }, strings.NewReader(input), &out, &errOut)
		if err != nil && id != hooks.CallbackToolDone {
			t.Fatalf("hook %s: %v (%s)", id, err, errOut.String())
		}
		return out.String()
	}
	write := func(path string) string {
		in, _ := json.Marshal(map[string]any{"hook_event_name": "PreToolUse", "cwd": filepath.Join(root, "sebastian"),
			"tool_name": "Write", "tool_input": map[string]string{"file_path": path, "content": "x"}, "tool_use_id": "t1"})
		return string(in)
	}
	if out := run(token, hooks.CallbackVaultGuard, write("/etc/passwd-copy")); !strings.Contains(out, `"permissionDecision":"deny"`) {
		t.Fatalf("a write outside the vault was not denied: %s", out)
	}
	if out := run(token, hooks.CallbackVaultGuard, write(filepath.Join(root, "sebastian", "note.md"))); out != `{"continue":true}` {
		t.Fatalf("a write inside the vault was not allowed: %s", out)
	}
	if out := run("not-a-terminal", hooks.CallbackVaultGuard, write(filepath.Join(root, "sebastian", "note.md"))); !strings.Contains(out, `"permissionDecision":"deny"`) {
		t.Fatalf("an unknown token was not denied: %s", out)
	}
	run(token, hooks.CallbackTurnEnd, `{"hook_event_name":"Stop","session_id":"cli-1"}`)
	if got := <-ended; got != "sebastian/s1" {
		t.Fatalf("turn end for %s", got)
	}
	unregister()
	if out := run(token, hooks.CallbackVaultGuard, write(filepath.Join(root, "sebastian", "note.md"))); !strings.Contains(out, `"permissionDecision":"deny"`) {
		t.Fatalf("a closed terminal's token was not denied: %s", out)
	}
}

// The settings file runs the command for every callback of Matchers, with
// the CLI's timeouts, and for Stop.
func TestCommandSettings(t *testing.T) {
	t.Parallel()
	h := hooks.New(hooks.Config{VaultRoot: t.TempDir(), Logger: zerolog.Nop()})
	raw, err := hooks.CommandSettings(h.Matchers(), []string{"/opt/it's/major", "hook"})
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Hooks map[string][]struct {
			Matcher string
			Hooks   []struct {
				Type, Command string
				Timeout       int
			}
		}
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"PreToolUse/*":           `'/opt/it'\''s/major' 'hook' 'vault_guard'`,
		"PreToolUse/WebFetch":    `'/opt/it'\''s/major' 'hook' 'webfetch_log'`,
		"PreToolUse/WebSearch":   `'/opt/it'\''s/major' 'hook' 'websearch_log'`,
		"PostToolUse/*":          `'/opt/it'\''s/major' 'hook' 'tool_done'`,
		"PostToolUseFailure/*":   `'/opt/it'\''s/major' 'hook' 'tool_done'`,
		"PreSkillShellCommand/*": `'/opt/it'\''s/major' 'hook' 'skill_shell'`,
		"Stop/":                  `'/opt/it'\''s/major' 'hook' turn_end`,
	}
	got := map[string]string{}
	for ev, groups := range s.Hooks {
		for _, g := range groups {
			for _, c := range g.Hooks {
				if c.Type != "command" {
					t.Errorf("%s: type %s", ev, c.Type)
				}
				got[ev+"/"+g.Matcher] = c.Command
			}
		}
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: got %q want %q", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("hooks %v", got)
	}
}
