package hooks_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/majorhq/major/hooks"
	"github.com/majorhq/major/vault"
)

// A turn end asks git only when a tool ran since the last look: a chat
// turn without tools costs no git call, and a tool call, even one that
// comes while the previous turn's end is being committed, makes the next
// end look again.
func TestCommitTurnLooksOnlyAfterToolCalls(t *testing.T) {
	t.Parallel()
	root := newRepo(t)
	writeFile(t, filepath.Join(root, "sebastian", "a.md"), "a")
	h := hooks.New(hooks.Config{VaultRoot: root, Git: newGitSync(t, vault.GitConfig{Root: root})})
	commits := func() int {
		out := strings.TrimSpace(git(t, root, "log", "--oneline", "--all"))
		if out == "" {
			return 0
		}
		return strings.Count(out, "\n") + 1
	}
	ctx := context.Background()
	c := newCaller("s1", "sebastian")

	// The session's first turn end looks, whatever happened before.
	if err := h.CommitTurn(ctx, "sebastian", c.ID()); err != nil {
		t.Fatal(err)
	}
	if got := commits(); got != 1 {
		t.Fatalf("%d commits after the first turn end, want 1", got)
	}
	// A change no tool of the session made is not the session's to commit.
	writeFile(t, filepath.Join(root, "sebastian", "b.md"), "b")
	if err := h.CommitTurn(ctx, "sebastian", c.ID()); err != nil {
		t.Fatal(err)
	}
	if got := commits(); got != 1 {
		t.Fatalf("%d commits after a turn end with no tool call, want 1", got)
	}
	// After a tool call, the turn end looks again.
	if _, err := h.Handle(ctx, c, hookRequest(t, hooks.CallbackVaultGuard, "Write", map[string]any{"file_path": "b.md", "content": "b"})); err != nil {
		t.Fatal(err)
	}
	h.EndTurn(c.ID())
	if err := h.CommitTurn(ctx, "sebastian", c.ID()); err != nil {
		t.Fatal(err)
	}
	if got := commits(); got != 2 {
		t.Fatalf("%d commits after a turn end with a tool call, want 2", got)
	}
	// Another session's first turn end looks too.
	writeFile(t, filepath.Join(root, "sebastian", "c.md"), "c")
	if err := h.CommitTurn(ctx, "sebastian", "s2"); err != nil {
		t.Fatal(err)
	}
	if got := commits(); got != 3 {
		t.Fatalf("%d commits after another session's first turn end, want 3", got)
	}
}
