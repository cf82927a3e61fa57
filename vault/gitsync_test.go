package vault_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/majorhq/major/vault"
)

func TestGitSyncWithoutRemoteCommitsOnlyThePaths(t *testing.T) {
	t.Parallel()
	root := newRepo(t)
	g := newGitSync(t, vault.GitConfig{Root: root})
	writeFile(t, filepath.Join(root, "petra/draft.md"), "not mine\n")
	err := g.Do(context.Background(), "Add log", []string{"claude/log.md"}, func() error {
		writeFile(t, filepath.Join(root, "claude/log.md"), "one\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := git(t, root, "log", "--format=%s|%an"); got != "Add log|Major" {
		t.Fatalf("log = %q", got)
	}
	if got := git(t, root, "show", "--name-only", "--format=", "HEAD"); got != "claude/log.md" {
		t.Fatalf("committed files = %q", got)
	}
	if got := git(t, root, "status", "--porcelain"); got != "?? petra/" {
		t.Fatalf("status after commit = %q", got)
	}
	// Nothing changed: no error and no commit.
	if err := g.Commit(context.Background(), "Again", "claude/log.md"); err != nil {
		t.Fatal(err)
	}
	if n := git(t, root, "rev-list", "--count", "HEAD"); n != "1" {
		t.Fatalf("commits = %s, want 1", n)
	}
}

func TestGitSyncPullsBeforeTheWrite(t *testing.T) {
	t.Parallel()
	root := newRepo(t)
	remote := withRemote(t, root)
	otherClone(t, remote, "elsewhere.md")
	g := newGitSync(t, vault.GitConfig{Root: root})
	err := g.Do(context.Background(), "Log", []string{"log.md"}, func() error {
		if _, err := os.Stat(filepath.Join(root, "elsewhere.md")); err != nil {
			return fmt.Errorf("the pull did not happen before the write: %w", err)
		}
		writeFile(t, filepath.Join(root, "log.md"), "x\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := git(t, root, "log", "--format=%s", "origin/main"); got != "Log\nelsewhere: elsewhere.md\nstart" {
		t.Fatalf("remote history = %q", got)
	}
}

func TestGitSyncRetriesARejectedPush(t *testing.T) {
	t.Parallel()
	root := newRepo(t)
	remote := withRemote(t, root)
	g := newGitSync(t, vault.GitConfig{Root: root})
	// The remote moves on after our pull and before our push.
	err := g.Do(context.Background(), "Log", []string{"log.md"}, func() error {
		otherClone(t, remote, "raced.md")
		writeFile(t, filepath.Join(root, "log.md"), "x\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	git(t, root, "fetch", "-q")
	if got := git(t, root, "log", "--format=%s", "origin/main"); got != "Log\nelsewhere: raced.md\nstart" {
		t.Fatalf("remote history = %q", got)
	}
	if merges := git(t, root, "rev-list", "--merges", "--count", "HEAD"); merges != "0" {
		t.Fatalf("history has %s merges; want a linear one", merges)
	}
}

func TestGitSyncConcurrentWritersQueue(t *testing.T) {
	t.Parallel()
	root := newRepo(t)
	withRemote(t, root)
	g := newGitSync(t, vault.GitConfig{Root: root})
	const n = 6
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			errs <- g.Do(context.Background(), fmt.Sprintf("Entry %d", i), []string{"log.md"}, func() error {
				f, err := os.OpenFile(filepath.Join(root, "log.md"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
				if err != nil {
					return err
				}
				defer f.Close()
				_, err = fmt.Fprintf(f, "entry %d\n", i)
				return err
			})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if lines := strings.Count(readFile(t, filepath.Join(root, "log.md")), "\n"); lines != n {
		t.Fatalf("log has %d lines, want %d", lines, n)
	}
	if got := git(t, root, "rev-list", "--count", "origin/main"); got != fmt.Sprint(n+1) {
		t.Fatalf("remote has %s commits, want %d", got, n+1)
	}
}

func TestGitSyncFailuresAreErrorsButTheWriteIsKept(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		setup func(tb testing.TB, root string) vault.GitConfig
		// committed: the entry is still committed locally.
		committed bool
	}{
		{"remote does not exist", func(tb testing.TB, root string) vault.GitConfig {
			withRemote(tb, root)
			git(tb, root, "remote", "set-url", "origin", filepath.Join(tb.TempDir(), "gone.git"))
			return vault.GitConfig{Root: root}
		}, true},
		{"remote hangs past the timeout", func(tb testing.TB, root string) vault.GitConfig {
			withRemote(tb, root)
			git(tb, root, "remote", "set-url", "origin", "ssh://vault.invalid/vault.git")
			// ssh is stood in for by a process that never answers; it is
			// git's child, so only killing the group ends it.
			return vault.GitConfig{Root: root, Timeout: 3 * time.Second, Env: []string{"GIT_SSH_COMMAND=sleep 60 #"}}
		}, true},
		{"git is not installed", func(tb testing.TB, root string) vault.GitConfig {
			return vault.GitConfig{Root: root, Git: filepath.Join(tb.TempDir(), "no-git")}
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := newRepo(t)
			g := newGitSync(t, tc.setup(t, root))
			start := time.Now()
			err := g.Do(context.Background(), "Log", []string{"log.md"}, func() error {
				writeFile(t, filepath.Join(root, "log.md"), "kept\n")
				return nil
			})
			if err == nil {
				t.Fatal("want an error")
			}
			if took := time.Since(start); took > 15*time.Second {
				t.Fatalf("failure took %s; git calls must be bounded", took)
			}
			if got := readFile(t, filepath.Join(root, "log.md")); got != "kept\n" {
				t.Fatalf("log = %q", got)
			}
			if tc.committed {
				if got := git(t, root, "log", "-1", "--format=%s"); got != "Log" {
					t.Fatalf("last commit = %q, want the entry committed locally", got)
				}
			}
		})
	}
}

// A remote that accepts connections and never answers holds a sync for
// RemoteTimeout, not for the far longer bound of every git call: a pull
// that got no answer is not followed by a push (nor the push by
// anything), the write is committed locally, and the error says that the
// remote did not answer in time, in those words for the person too.
func TestGitSyncARemoteThatNeverAnswers(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		point func(tb testing.TB, root, silent string)
	}{
		{"the pull hangs", func(tb testing.TB, root, silent string) {
			git(tb, root, "remote", "set-url", "origin", silent)
		}},
		{"the push hangs", func(tb testing.TB, root, silent string) {
			git(tb, root, "remote", "set-url", "--push", "origin", silent)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			root := newRepo(t)
			withRemote(t, root)
			silent, accepted := silentRemote(t)
			c.point(t, root, silent)
			// The bound covers the answering side's git calls too (the pull
			// when only the push hangs): long enough for a loaded machine.
			g := newGitSync(t, vault.GitConfig{Root: root, Timeout: 10 * time.Minute, RemoteTimeout: 5 * time.Second})
			synced := make(chan error, 1)
			go func() {
				synced <- g.Do(context.Background(), "Log", []string{"log.md"}, func() error {
					writeFile(t, filepath.Join(root, "log.md"), "kept\n")
					return nil
				})
			}()
			var err error
			select {
			case err = <-synced:
			case <-time.After(time.Minute):
				t.Fatal("the sync is still waiting for a remote that never answers")
			}
			if !errors.Is(err, vault.ErrRemoteTimeout) {
				t.Fatalf("sync error %v, want ErrRemoteTimeout", err)
			}
			if got := vault.Explain(err); !strings.Contains(got, "did not answer in time") {
				t.Fatalf("the person is told %q", got)
			}
			if got := git(t, root, "log", "-1", "--format=%s"); got != "Log" {
				t.Fatalf("last commit = %q, want the entry committed locally", got)
			}
			if n := accepted(); n != 1 {
				t.Fatalf("the remote was asked %d times in one sync", n)
			}
		})
	}
}

func TestGitSyncClose(t *testing.T) {
	t.Parallel()
	root := newRepo(t)
	g := vault.NewGitSync(vault.GitConfig{Root: root})
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if err := g.Commit(context.Background(), "x", "a.md"); !errors.Is(err, vault.ErrClosed) {
		t.Fatalf("commit after close: %v", err)
	}
}

func TestGitSyncRefusesPathsOutsideTheRepository(t *testing.T) {
	t.Parallel()
	g := newGitSync(t, vault.GitConfig{Root: newRepo(t)})
	for _, p := range []string{"/etc/passwd", "../x", "", ":(glob)*"} {
		if err := g.Commit(context.Background(), "x", p); err == nil {
			t.Errorf("commit %q: want an error", p)
		}
	}
}

// A path git refuses to record (here a .git variant put on disk past the
// guard, by hand or by an older server) must not hold back the person's
// other changes: they are committed and pushed, and the refused path is
// reported, on every commit until it is gone.
func TestGitSyncCommitsAroundARefusedPath(t *testing.T) {
	t.Parallel()
	root := newRepo(t)
	remote := withRemote(t, root)
	g := newGitSync(t, vault.GitConfig{Root: root})
	writeFile(t, filepath.Join(root, "sebastian", ".GIT", "x.md"), "refused\n")
	for i, file := range []string{"notes.md", "more.md"} {
		writeFile(t, filepath.Join(root, "sebastian", file), "mine\n")
		err := g.Commit(context.Background(), fmt.Sprintf("Turn %d", i), "sebastian/")
		var refused *vault.RefusedPathsError
		if !errors.As(err, &refused) {
			t.Fatalf("commit %d: error %v, want a *RefusedPathsError", i, err)
		}
		if want := []string{"sebastian/.GIT/x.md"}; !slices.Equal(refused.Paths, want) {
			t.Fatalf("refused paths = %q, want %q", refused.Paths, want)
		}
		if got := git(t, root, "show", "--name-only", "--format=%s", "HEAD"); got != fmt.Sprintf("Turn %d\n\nsebastian/%s", i, file) {
			t.Fatalf("commit %d = %q", i, got)
		}
	}
	if git(t, root, "rev-parse", "HEAD") != git(t, remote, "rev-parse", "main") {
		t.Fatal("the commits were not pushed")
	}
	if got := git(t, root, "status", "--porcelain", "--untracked-files=all"); got != "?? sebastian/.GIT/x.md" {
		t.Fatalf("status = %q", got)
	}
	// Nothing but the refused path: no commit, and still reported.
	head := git(t, root, "rev-parse", "HEAD")
	var refused *vault.RefusedPathsError
	if err := g.Commit(context.Background(), "Nothing", "sebastian/"); !errors.As(err, &refused) {
		t.Fatalf("error %v, want a *RefusedPathsError", err)
	}
	if git(t, root, "rev-parse", "HEAD") != head {
		t.Fatal("a commit without changes")
	}
}
func TestGitSyncDoesNotPullUnderAnOpenWrite(t *testing.T) {
	t.Parallel()
	root := newRepo(t)
	remote := withRemote(t, root)
	otherClone(t, remote, "elsewhere.md")
	// The sync waits as briefly as it can for the open write.
	g := newGitSync(t, vault.GitConfig{Root: root, WriteWait: time.Nanosecond})
	if err := g.BeginWrite(context.Background(), "s1", "tool-1"); err != nil {
		t.Fatal(err)
	}
	err := g.Do(context.Background(), "Log", []string{"log.md"}, func() error {
		writeFile(t, filepath.Join(root, "log.md"), "x\n")
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "still being written") {
		t.Fatalf("sync under an open write: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "elsewhere.md")); err == nil {
		t.Fatal("pulled while a write was open")
	}
	if got := git(t, root, "log", "-1", "--format=%s"); got != "Log" {
		t.Fatalf("last commit = %q, want the write committed locally", got)
	}
	// Once the write is over, the next sync catches up.
	g.EndWrite("s1", "tool-1")
	if err := g.Commit(context.Background(), "Again", "log.md"); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "log.md"), "y\n")
	if err := g.Commit(context.Background(), "Again", "log.md"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "elsewhere.md")); err != nil {
		t.Fatal("not pulled after the write ended")
	}
}

func TestGitSyncHoldsWritesBack(t *testing.T) {
	t.Parallel()
	root := newRepo(t)
	g := newGitSync(t, vault.GitConfig{Root: root, WriteHold: time.Nanosecond})
	err := g.Do(context.Background(), "Log", []string{"log.md"}, func() error {
		// A file tool starting now, while the sync runs, is held back.
		if err := g.BeginWrite(context.Background(), "s1", "tool-1"); !errors.Is(err, vault.ErrSyncRunning) {
			return fmt.Errorf("write during a sync: %v", err)
		}
		writeFile(t, filepath.Join(root, "log.md"), "x\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.BeginWrite(context.Background(), "s1", "tool-2"); err != nil {
		t.Fatalf("write after the sync: %v", err)
	}
	g.EndWrites("s1")
}

// A session holds at most ten write leases: one more waits for one of
// them to end or expire (and gives up after WriteHold), a renewal and
// another session's write do not wait.
func TestGitSyncBoundsASessionsWrites(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  vault.GitConfig
		// free ends a lease of s1's, or lets them expire.
		free func(g *vault.GitSync)
	}{
		{"ended", vault.GitConfig{WriteHold: time.Nanosecond}, func(g *vault.GitSync) { g.EndWrite("s1", "tool-3") }},
		{"expired", vault.GitConfig{WriteTTL: 50 * time.Millisecond}, func(*vault.GitSync) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.cfg.Root = newRepo(t)
			g := newGitSync(t, tc.cfg)
			ctx := context.Background()
			for i := range 10 {
				if err := g.BeginWrite(ctx, "s1", fmt.Sprint("tool-", i)); err != nil {
					t.Fatalf("write %d: %v", i, err)
				}
			}
			if tc.cfg.WriteHold == time.Nanosecond {
				if err := g.BeginWrite(ctx, "s1", "tool-10"); !errors.Is(err, vault.ErrTooManyWrites) {
					t.Fatalf("an eleventh write: %v, want ErrTooManyWrites", err)
				}
				if err := g.BeginWrite(ctx, "s1", "tool-0"); err != nil {
					t.Fatalf("a renewal: %v", err)
				}
			}
			if err := g.BeginWrite(ctx, "s2", "tool-0"); err != nil {
				t.Fatalf("another session's write: %v", err)
			}
			tc.free(g)
			if err := g.BeginWrite(ctx, "s1", "tool-10"); err != nil {
				t.Fatalf("a write once a lease is free: %v", err)
			}
			g.EndWrites("s1")
			g.EndWrites("s2")
		})
	}
}

// Leases that nobody ends, renewed as fast as they can be, do not keep a
// sync from pulling: it waits for the ones open when it starts, which
// expire (WriteTTL) before it stops waiting (WriteWait), and none is taken
// or renewed while it runs.
func TestGitSyncPullsPastLeasesNobodyEnds(t *testing.T) {
	t.Parallel()
	root := newRepo(t)
	remote := withRemote(t, root)
	otherClone(t, remote, "elsewhere.md")
	g := newGitSync(t, vault.GitConfig{Root: root, WriteTTL: 100 * time.Millisecond})
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	if err := g.BeginWrite(ctx, "s1", "hold-0"); err != nil {
		t.Fatal(err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			_ = g.BeginWrite(ctx, "s1", fmt.Sprint("hold-", i%20))
		}
	}()
	err := g.Do(context.Background(), "Log", []string{"log.md"}, func() error {
		if _, err := os.Stat(filepath.Join(root, "elsewhere.md")); err != nil {
			return fmt.Errorf("the sync did not pull: %w", err)
		}
		writeFile(t, filepath.Join(root, "log.md"), "x\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestGitSyncRecoversFromAKilledGitCall leaves the repository as a git
// call killed half way does (a stale index.lock, a rebase stopped with
// the person's edits in its autostash): the next write clears it and
// goes through, and the stashed edits and those made since are back in
// the work tree or, when they no longer apply, kept and reported.
func TestGitSyncRecoversFromAKilledGitCall(t *testing.T) {
	t.Parallel()
	// stopRebase commits twice and leaves a rebase stopped after it
	// stashed the edit to notes.md.
	stopRebase := func(tb testing.TB, root string) {
		for _, n := range []string{"one", "two"} {
			writeFile(tb, filepath.Join(root, n+".md"), n+"\n")
			git(tb, root, "add", n+".md")
			git(tb, root, "commit", "-q", "-m", n)
		}
		writeFile(tb, filepath.Join(root, "notes.md"), "edited\n")
		cmd := exec.Command("git", "-c", "user.name=Test", "-c", "user.email=test@localhost",
			"rebase", "--autostash", "--exec", "false", "HEAD~1")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err == nil {
			tb.Fatalf("the rebase did not stop: %s", out)
		}
		if _, err := os.Stat(filepath.Join(root, ".git", "rebase-merge", "autostash")); err != nil {
			tb.Fatalf("no rebase with an autostash under way: %v", err)
		}
	}
	for _, tc := range []struct {
		name  string
		plant func(tb testing.TB, root string)
		// notes is notes.md after the write; kept: the edit made after
		// the rebase stopped is in the stash list and the write reports it.
		notes string
		kept  bool
	}{
		{"index.lock", func(tb testing.TB, root string) {
			writeFile(tb, filepath.Join(root, ".git", "index.lock"), "")
		}, "notes\n", false},
		{"rebase stopped", stopRebase, "edited\n", false},
		{"rebase stopped and index.lock", func(tb testing.TB, root string) {
			stopRebase(tb, root)
			writeFile(tb, filepath.Join(root, ".git", "index.lock"), "")
		}, "edited\n", false},
		{"autostash no longer applies", func(tb testing.TB, root string) {
			stopRebase(tb, root)
			writeFile(tb, filepath.Join(root, "notes.md"), "edited again\n")
		}, "edited\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := newRepo(t)
			remote := withRemote(t, root)
			writeFile(t, filepath.Join(root, "notes.md"), "notes\n")
			git(t, root, "add", "notes.md")
			git(t, root, "commit", "-q", "-m", "notes")
			git(t, root, "push", "-q")
			tc.plant(t, root)
			otherClone(t, remote, "elsewhere.md")

			g := newGitSync(t, vault.GitConfig{Root: root})
			err := g.Do(context.Background(), "Log", []string{"log.md"}, func() error {
				writeFile(t, filepath.Join(root, "log.md"), "x\n")
				return nil
			})
			if tc.kept {
				if err == nil || !strings.Contains(err.Error(), "git stash list") {
					t.Errorf("write = %v, want the kept autostash reported", err)
				}
				if got := git(t, root, "show", "stash@{0}:notes.md"); got != "edited again" {
					t.Errorf("notes.md in the stash = %q, want the edit made after the rebase stopped", got)
				}
			} else {
				if err != nil {
					t.Errorf("write: %v", err)
				}
				if got := git(t, root, "stash", "list"); got != "" {
					t.Errorf("stash list = %q", got)
				}
			}
			for _, d := range []string{"index.lock", "rebase-merge", "rebase-apply"} {
				if _, err := os.Stat(filepath.Join(root, ".git", d)); err == nil {
					t.Errorf(".git/%s is still there", d)
				}
			}
			if got := readFile(t, filepath.Join(root, "notes.md")); got != tc.notes {
				t.Errorf("notes.md = %q, want %q", got, tc.notes)
			}
			if got := git(t, remote, "log", "--format=%s", "-1", "main"); got != "Log" {
				t.Errorf("newest commit on the remote = %q, want the write", got)
			}
			if got := git(t, remote, "show", "main:elsewhere.md"); got != "from elsewhere" {
				t.Errorf("the remote's change was lost: %q", got)
			}
		})
	}
}

// A repository of its own in a person's folder (a sandbox can make one)
// is never recorded, and git never looks into it: its configuration
// names a program (core.fsmonitor) that must not run. The person's other
// changes are committed, and the repository reported as refused.
func TestGitSyncNeverRecordsOrRunsANestedRepository(t *testing.T) {
	t.Parallel()
	root := newRepo(t)
	g := newGitSync(t, vault.GitConfig{Root: root})
	sub := filepath.Join(root, "sebastian", "sub")
	marker := filepath.Join(t.TempDir(), "ran")
	git(t, root, "init", "-q", sub)
	git(t, sub, "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-q", "--allow-empty", "-m", "x")
	git(t, sub, "config", "core.fsmonitor", "touch '"+marker+"'; false")
	writeFile(t, filepath.Join(root, "sebastian", "notes.md"), "mine\n")
	for i := range 2 {
		err := g.Commit(context.Background(), fmt.Sprintf("Turn %d", i), "sebastian/")
		var refused *vault.RefusedPathsError
		if !errors.As(err, &refused) || !slices.Equal(refused.Paths, []string{"sebastian/sub"}) {
			t.Fatalf("commit %d: %v, want sebastian/sub refused", i, err)
		}
		if _, err := g.Changed(context.Background(), "sebastian/"); err != nil {
			t.Fatal(err)
		}
	}
	if got := git(t, root, "ls-tree", "-r", "--name-only", "HEAD"); strings.Contains(got, "sub") || !strings.Contains(got, "sebastian/notes.md") {
		t.Fatalf("HEAD holds %q", got)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("git ran the nested repository's fsmonitor")
	}
}

// A turn's commit says what changed in the person's folder, by path in
// it, and names the session where SessionHead finds it; what changed
// elsewhere stays out.
func TestGitSyncCommitTurnSaysWhatChanged(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		write   map[string]string // relative to the repository
		remove  []string
		subject string
	}{
		{name: "one note", write: map[string]string{"sebastian/notes/a.md": "a\n"},
			subject: "sebastian: 1 note changed (notes/a.md)"},
		{name: "two notes", write: map[string]string{"sebastian/notes/b.md": "b\n", "sebastian/notes/a.md": "a\n"},
			subject: "sebastian: 2 notes changed (notes/a.md, notes/b.md)"},
		{name: "a note and an image", write: map[string]string{"sebastian/a.md": "a\n", "sebastian/attachments/p.png": "png"},
			subject: "sebastian: 2 files changed (a.md, attachments/p.png)"},
		{name: "many", write: map[string]string{"sebastian/1.md": "1", "sebastian/2.md": "2", "sebastian/3.md": "3", "sebastian/4.md": "4", "sebastian/5.md": "5"},
			subject: "sebastian: 5 notes changed (1.md, 2.md, 3.md, and 2 more)"},
		{name: "a deleted and a changed note", write: map[string]string{"sebastian/welcome.md": "changed\n"}, remove: []string{"sebastian/old.md"},
			subject: "sebastian: 2 notes changed (old.md, welcome.md)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := newRepo(t)
			writeFile(t, filepath.Join(root, "sebastian/welcome.md"), "hello\n")
			writeFile(t, filepath.Join(root, "sebastian/old.md"), "old\n")
			git(t, root, "add", "-A")
			git(t, root, "commit", "-qm", "notes")
			g := newGitSync(t, vault.GitConfig{Root: root})
			for p, body := range tt.write {
				writeFile(t, filepath.Join(root, p), body)
			}
			for _, p := range tt.remove {
				if err := os.Remove(filepath.Join(root, p)); err != nil {
					t.Fatal(err)
				}
			}
			writeFile(t, filepath.Join(root, "petra/draft.md"), "not this turn's\n")
			if err := g.CommitTurn(context.Background(), "sebastian", "s-1"); err != nil {
				t.Fatal(err)
			}
			if got := git(t, root, "log", "-1", "--format=%s"); got != tt.subject {
				t.Errorf("subject %q, want %q", got, tt.subject)
			}
			if got := git(t, root, "log", "-1", "--format=%b"); got != "Session s-1: the changes of a turn in sebastian's folder." {
				t.Errorf("body %q", got)
			}
			head, err := g.SessionHead(context.Background(), "s-1", time.Time{})
			if err != nil || head != git(t, root, "rev-parse", "HEAD") {
				t.Errorf("SessionHead %q, %v", head, err)
			}
			if got := git(t, root, "status", "--porcelain"); got != "?? petra/" {
				t.Errorf("status after the turn's commit %q", got)
			}
		})
	}
}
