package hooks_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/majorhq/major/clitest"
	"github.com/majorhq/major/hooks"
	"github.com/majorhq/major/scriptedmodel"
	"github.com/majorhq/major/supervisor"
	"github.com/majorhq/major/vault"
)

// syncWindow is a slow spot inside every pull that brings a change of
// shared/: a smudge filter that runs while git checks that change out,
// after the autostash has reset the work tree and before it is applied
// again. The filter says the window is open (file "open") and keeps it
// open until the test says "go" (at most 5s).
type syncWindow struct {
	dir string
}

func newSyncWindow(tb testing.TB, root string) *syncWindow {
	tb.Helper()
	w := &syncWindow{dir: tb.TempDir()}
	script := filepath.Join(w.dir, "smudge.sh")
	writeFile(tb, script, fmt.Sprintf(`#!/bin/sh
d=%q
echo >>"$d/opened"
touch "$d/open"
i=0
while [ ! -e "$d/go" ] && [ $i -lt 250 ]; do sleep 0.02; i=$((i+1)); done
rm -f "$d/open" "$d/go"
exec cat
`, w.dir))
	if err := os.Chmod(script, 0o755); err != nil {
		tb.Fatal(err)
	}
	git(tb, root, "config", "filter.window.smudge", script)
	writeFile(tb, filepath.Join(root, ".git", "info", "attributes"), "shared/** filter=window\n")
	return w
}

func (w *syncWindow) isOpen() bool {
	_, err := os.Stat(filepath.Join(w.dir, "open"))
	return err == nil
}

// waitOpen waits up to within for the window to open.
func (w *syncWindow) waitOpen(within time.Duration) bool {
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if w.isOpen() {
			return true
		}
	}
	return false
}

// close lets the pull in the window go on.
func (w *syncWindow) close() {
	if w.isOpen() {
		_ = os.WriteFile(filepath.Join(w.dir, "go"), nil, 0o644)
	}
}

// opened counts the windows so far.
func (w *syncWindow) opened() int {
	b, _ := os.ReadFile(filepath.Join(w.dir, "opened"))
	return strings.Count(string(b), "\n")
}

// appender is a model that, for "APPEND <file> <line>...", reads the file
// and writes it back with the line added, once per line. A line "@window"
// makes it wait for the sync window to open before the next read. Tool
// errors are recorded.
type appender struct {
	window *syncWindow
	mu     sync.Mutex
	errors []string
}

var lineNumber = regexp.MustCompile(`^\s*\d+[\t→](.*)$`)

func (a *appender) respond(req scriptedmodel.Request) scriptedmodel.Reply {
	start := -1
	var fields []string
	for i, m := range req.Messages {
		for _, b := range m.Content {
			if m.Role == "user" && b.Type == "text" && strings.HasPrefix(b.Text, "APPEND ") {
				start, fields = i, strings.Fields(b.Text)[1:]
			}
		}
	}
	if texts := req.UserTexts(); len(texts) > 0 && strings.HasPrefix(texts[len(texts)-1], "CALLS ") {
		return callsModel(req)
	}
	if start < 0 || len(fields) < 2 {
		return scriptedmodel.Text("nothing to do")
	}
	results := req.ToolResults()
	for _, b := range results {
		if b.IsError {
			a.mu.Lock()
			a.errors = append(a.errors, b.ResultText())
			a.mu.Unlock()
		}
	}
	step := 0
	for _, m := range req.Messages[start+1:] {
		if m.Role == "assistant" {
			step++
		}
	}
	file, lines := fields[0], fields[1:]
	// Each line is a read and a write; "@window" is neither.
	for len(lines) > 0 && step >= 2 {
		if lines[0] != "@window" {
			step -= 2
		}
		lines = lines[1:]
	}
	if len(lines) > 0 && lines[0] == "@window" {
		if step == 0 && !a.window.waitOpen(20*time.Second) {
			return scriptedmodel.Text("the sync window never opened")
		}
		lines = lines[1:]
	}
	if len(lines) == 0 {
		return scriptedmodel.Text("appended")
	}
	if step == 0 {
		return scriptedmodel.ToolUse("Read", map[string]any{"file_path": file})
	}
	// The read shows numbered lines; the last one is empty when the file
	// ends with a newline.
	var read []string
	if len(results) > 0 {
		for _, l := range strings.Split(results[0].ResultText(), "\n") {
			if m := lineNumber.FindStringSubmatch(l); m != nil {
				read = append(read, m[1])
			}
		}
	}
	body := strings.Join(read, "\n") + lines[0] + "\n"
	return scriptedmodel.ToolUse("Write", map[string]any{"file_path": file, "content": body})
}

func (a *appender) toolErrors() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.errors...)
}

// TestFileToolsAndGitSyncsExcludeEachOther has two sessions append to
// their notes through the real CLI while the other's turn-end commit
// pulls a remote that another clone keeps moving on. Each pull is held
// open in the middle (work tree reset by the autostash) while petra's
// model reads and rewrites a file the autostash holds: that read and
// write must wait for the sync, or an edit ends up in a stash, reset away
// or based on a stale read. Then both sessions go on with the WebFetch
// log (webFetchLogThroughCLI), and everything ends committed and pushed.
func TestFileToolsAndGitSyncsExcludeEachOther(t *testing.T) {
	t.Parallel()
	model := &appender{}
	env := clitest.New(t, model.respond)
	root := env.VaultRoot
	remote := withRemote(t, root)
	writeFile(t, filepath.Join(root, "sebastian", "s.md"), "sebastian's notes\n")
	writeFile(t, filepath.Join(root, "petra", "p.md"), "petra's notes\n")
	git(t, root, "add", "sebastian", "petra")
	git(t, root, "commit", "-q", "-m", "notes")
	git(t, root, "push", "-q")
	model.window = newSyncWindow(t, root)
	other := filepath.Join(t.TempDir(), "other")
	git(t, t.TempDir(), "clone", "-q", remote, other)

	g := newGitSync(t, vault.GitConfig{Root: root})
	h := newHooks(t, root, g)
	seb, sebRec := startSession(t, env, "sebastian", "race-s", h, nil)
	petra, petraRec := startWatchedSession(t, env, "petra", "race-p", h, model.window)

	const rounds = 2
	wantS, wantP := "sebastian's notes\n", "petra's notes\n"
	for r := 1; r <= rounds; r++ {
		// The remote moves on.
		git(t, other, "pull", "-q", "--rebase")
		writeFile(t, filepath.Join(other, "shared", "news.md"), fmt.Sprintf("news %d\n", r))
		git(t, other, "add", "shared")
		git(t, other, "commit", "-q", "-m", fmt.Sprintf("news %d", r))
		git(t, other, "push", "-q", "origin", "HEAD:main")

		// petra's turn writes p.md, then waits for the sync window and
		// reads and rewrites p.md in it.
		a, b := fmt.Sprintf("p%d.a", r), fmt.Sprintf("p%d.b", r)
		wantP += a + "\n" + b + "\n"
		if err := petra.Send(context.Background(), fmt.Sprintf("APPEND p.md %s @window %s", a, b)); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { return strings.Contains(readFile(t, filepath.Join(root, "petra", "p.md")), a) })

		// sebastian's turn ends with a commit: its pull opens the window.
		line := fmt.Sprintf("s%d", r)
		wantS += line + "\n"
		sebRec.Turn(t, seb, "APPEND s.md "+line)
		h.EndTurn(seb.ID())
		if err := h.CommitTurn(context.Background(), "sebastian", seb.ID()); err != nil {
			t.Errorf("round %d: sebastian's commit: %v", r, err)
		}
		if ev := petraRec.WaitEnd(t, 60*time.Second); ev.Err != nil {
			t.Fatalf("round %d: petra's turn: %v", r, ev.Err)
		}
		h.EndTurn(petra.ID())
		if err := h.CommitTurn(context.Background(), "petra", petra.ID()); err != nil {
			t.Errorf("round %d: petra's commit: %v", r, err)
		}
	}

	t.Run("WebFetchLogThroughCLI", func(t *testing.T) {
		webFetchLogThroughCLI(t, root, remote,
			map[string]*supervisor.CLI{"sebastian": seb, "petra": petra},
			map[string]*clitest.Recorder{"sebastian": sebRec, "petra": petraRec})
	})

	if n := model.window.opened(); n != rounds {
		t.Errorf("the sync window opened %d times, want %d", n, rounds)
	}
	if errs := model.toolErrors(); len(errs) > 0 {
		t.Errorf("tool calls failed: %q", errs)
	}
	if got := git(t, root, "stash", "list"); got != "" {
		t.Errorf("edits left in a stash:\n%s", got)
	}
	for _, d := range []string{"rebase-merge", "rebase-apply", "index.lock"} {
		if _, err := os.Stat(filepath.Join(root, ".git", d)); err == nil {
			t.Errorf(".git/%s left behind", d)
		}
	}
	for path, want := range map[string]string{"sebastian/s.md": wantS, "petra/p.md": wantP} {
		if got := readFile(t, filepath.Join(root, path)); got != want {
			t.Errorf("%s in the vault:\n%s\nwant:\n%s", path, got, want)
		}
		if got := git(t, remote, "show", "main:"+path) + "\n"; got != want {
			t.Errorf("%s on the remote:\n%s\nwant:\n%s", path, got, want)
		}
	}
	if got := git(t, root, "status", "--porcelain"); got != "" {
		t.Errorf("left uncommitted:\n%s", got)
	}
}

// startWatchedSession is startSession for the session that acts in the
// sync window: it closes the window as soon as a file tool of the
// session is held back by the sync (its PreToolUse still undecided after
// a moment), or once a write made in the window is on disk.
func startWatchedSession(tb testing.TB, env *clitest.Env, person, id string, h *hooks.Hooks, w *syncWindow) (*supervisor.CLI, *clitest.Recorder) {
	tb.Helper()
	handle := func(ctx context.Context, s hooks.Caller, req *supervisor.ControlRequest) (json.RawMessage, error) {
		if req.CallbackID != hooks.CallbackVaultGuard || !w.isOpen() {
			return h.Handle(ctx, s, req)
		}
		held := time.AfterFunc(300*time.Millisecond, w.close)
		out, err := h.Handle(ctx, s, req)
		held.Stop()
		var in supervisor.HookInput
		_ = json.Unmarshal(req.HookInput, &in)
		var write struct {
			FilePath string `json:"file_path"`
			Content  string `json:"content"`
		}
		if in.ToolName == "Write" && json.Unmarshal(in.ToolInput, &write) == nil {
			path := filepath.Join(env.Vault(person), write.FilePath)
			go func() {
				for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
					if b, _ := os.ReadFile(path); string(b) == write.Content {
						break
					}
				}
				w.close()
			}()
		}
		return out, err
	}
	return startSessionHandled(tb, env, person, id, hooks.IsolationArgs(), h.Matchers(), handle)
}

// waitFor polls cond for up to a minute.
func waitFor(tb testing.TB, cond func() bool) {
	tb.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			tb.Fatal("condition not met within a minute")
		}
	}
}
