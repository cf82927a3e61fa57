package hooks_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// While a rewind restores files, the vault's git sync does not pull (a
// pull's autostash would take the restore away and put it back over
// newer work): it commits what is there locally and catches up once the
// rewind released its hold.
func TestRewindHoldsTheGitSyncOff(t *testing.T) {
	t.Parallel()
	root := newRepo(t)
	remote := withRemote(t, root)
	otherClone(t, remote, "elsewhere.md")
	// The sync waits as briefly as it can for the open rewind.
	g := newGitSync(t, vault.GitConfig{Root: root, WriteWait: time.Nanosecond})
	h := hooks.New(hooks.Config{VaultRoot: root, Git: g})
	ctx := context.Background()
	release, err := h.BeginRewind(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "sebastian", "restored.md"), "as it was\n")
	// Meanwhile another session's turn ends and syncs.
	writeFile(t, filepath.Join(root, "petra", "note.md"), "petra's\n")
	err = g.Commit(ctx, "Petra's turn", "petra")
	if err == nil || !strings.Contains(err.Error(), "still being written") {
		t.Fatalf("sync during a rewind: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "elsewhere.md")); err == nil {
		t.Fatal("pulled while a rewind restored files")
	}
	release()
	if err := h.CommitRewind(ctx, "sebastian", "s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "elsewhere.md")); err != nil {
		t.Fatal("not pulled after the rewind ended")
	}
	if got := git(t, root, "log", "-1", "--format=%s", "--", "sebastian/restored.md"); got == "" {
		t.Fatal("the restored file was not committed")
	}
}
