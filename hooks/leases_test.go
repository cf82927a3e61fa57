package hooks_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/hooks"
	"github.com/majorhq/major/vault"
)

// A terminal's shell has the terminal's hook token in its environment, and
// `major hook vault_guard` with a made-up PreToolUse takes a write lease
// that no PostToolUse ends. Taking such leases again and again, under many
// tool_use_ids, must not keep the vault's syncs from pulling: with the
// server's own settings, a sync still pulls the remote's changes.
func TestHookTokenCannotKeepSyncsFromPulling(t *testing.T) {
	t.Parallel()
	root := newRepo(t)
	remote := withRemote(t, root)
	otherClone(t, remote, "elsewhere.md")
	if err := os.MkdirAll(filepath.Join(root, "sebastian"), 0o755); err != nil {
		t.Fatal(err)
	}
	g := newGitSync(t, vault.GitConfig{Root: root})
	h := hooks.New(hooks.Config{VaultRoot: root, Git: g, Logger: zerolog.Nop()})
	cmds, err := hooks.ListenCommands(hooks.CommandConfig{Socket: filepath.Join(t.TempDir(), "hooks.sock"), Handle: h.Handle, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cmds.Close()
	token, unregister := cmds.Register(newCaller("s1", "sebastian"))
	defer unregister()
	env := map[string]string{hooks.SocketEnv: cmds.Socket(), hooks.TokenEnv: token}

	// hold is what the shell runs: a Glob that never comes back.
	hold := func(ctx context.Context, id string) error {
		in, _ := json.Marshal(map[string]any{"hook_event_name": "PreToolUse", "tool_name": "Glob",
			"tool_input": map[string]string{"pattern": "*"}, "tool_use_id": id, "cwd": filepath.Join(root, "sebastian")})
		var out, errOut bytes.Buffer
		if err := hooks.RunCommand(ctx, []string{hooks.CallbackVaultGuard}, func(k string) string { return env[k] },
			bytes.NewReader(in), &out, &errOut); err != nil {
			return err
		}
		if out.String() != `{"continue":true}` {
			return fmt.Errorf("%s: %s", out.String(), errOut.String())
		}
		return nil
	}
	if err := hold(context.Background(), "hold-0"); err != nil {
		t.Fatalf("the first lease was not taken: %v", err)
	}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	// Four shells, each renewing its own leases and making up new ones.
	for s := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				_ = hold(ctx, fmt.Sprintf("hold-%d-%d", s, i%8))
				_ = hold(ctx, "hold-0")
			}
		}()
	}

	err = g.Do(context.Background(), "Log", []string{"claude/log.md"}, func() error {
		if _, err := os.Stat(filepath.Join(root, "elsewhere.md")); err != nil {
			return fmt.Errorf("the sync did not pull: %w", err)
		}
		writeFile(t, filepath.Join(root, "claude", "log.md"), "x\n")
		return nil
	})
	if err != nil {
		t.Fatalf("sync while the leases are held: %v", err)
	}
	if got := git(t, remote, "log", "-1", "--format=%s", "main"); !strings.Contains(got, "Log") {
		t.Fatalf("newest commit on the remote = %q, want the sync's", got)
	}
}
