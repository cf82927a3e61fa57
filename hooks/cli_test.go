package hooks_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/clitest"
	"github.com/majorhq/major/hooks"
	"github.com/majorhq/major/scriptedmodel"
	"github.com/majorhq/major/supervisor"
	"github.com/majorhq/major/vault"
)

// initEvent is the last system/init the CLI sent.
func initEvent(tb testing.TB, r *clitest.Recorder) map[string]any {
	tb.Helper()
	events := r.Events()
	for i := len(events) - 1; i >= 0; i-- {
		ev := events[i]
		if ev.Kind == supervisor.EventCLI && ev.Msg.Type == "system" && ev.Msg.Subtype == "init" {
			var m map[string]any
			if err := json.Unmarshal(ev.Msg.Raw, &m); err != nil {
				tb.Fatal(err)
			}
			return m
		}
	}
	tb.Fatal("no system/init event")
	return nil
}

var fixedClock = func() time.Time { return time.Date(2026, 1, 18, 14, 32, 15, 0, time.UTC) }

func newHooks(tb testing.TB, root string, g *vault.GitSync) *hooks.Hooks {
	tb.Helper()
	return hooks.New(hooks.Config{
		VaultRoot: root, Git: g, Clock: fixedClock, LogTimeout: 20 * time.Second,
		Logger: zerolog.New(zerolog.NewTestWriter(tb)).Level(zerolog.WarnLevel),
	})
}

// startSession is a session of person wired as the server wires it: the
// hooks answer its callbacks and IsolationArgs keep the vault from
// configuring the CLI (extraArgs, when not nil, replaces them).
func startSession(tb testing.TB, env *clitest.Env, person, id string, h *hooks.Hooks, extraArgs []string) (*supervisor.CLI, *clitest.Recorder) {
	tb.Helper()
	if extraArgs == nil {
		extraArgs = hooks.IsolationArgs()
	}
	return startSessionHandled(tb, env, person, id, extraArgs, h.Matchers(), h.Handle)
}

// startSessionHandled is startSession whose hook callbacks (registered by
// matchers) go to handle.
func startSessionHandled(tb testing.TB, env *clitest.Env, person, id string, extraArgs []string,
	matchers map[string][]supervisor.HookMatcher,
	handle func(context.Context, hooks.Caller, *supervisor.ControlRequest) (json.RawMessage, error)) (*supervisor.CLI, *clitest.Recorder) {
	tb.Helper()
	rec := clitest.NewRecorder()
	s := supervisor.NewCLI(supervisor.CLIConfig{
		ID: id, Person: person, Dir: env.Vault(person),
		Spec: supervisor.Spec{
			Binary:         env.Binary,
			Env:            env.ChildEnv(),
			SystemPrompt:   "You are a test assistant.",
			Tools:          []string{"Read", "Write", "Edit", "Glob", "Grep", "WebFetch", "WebSearch", "Skill"},
			PermissionMode: "acceptEdits",
			Hooks:          matchers,
			ExtraArgs:      extraArgs,
			Grace:          2 * time.Second,
		},
		Handlers: func(s *supervisor.CLI) supervisor.Handlers {
			return supervisor.Handlers{HookCallback: func(ctx context.Context, req *supervisor.ControlRequest) (json.RawMessage, error) {
				return handle(ctx, s, req)
			}}
		},
		Sink:   rec,
		Logger: zerolog.New(zerolog.NewTestWriter(tb)).Level(zerolog.WarnLevel),
	})
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("close session: %v", err)
		}
	})
	return s, rec
}

func webFetch(url string) string {
	in, _ := json.Marshal(map[string]string{"url": url, "prompt": "x"})
	return "[[tool WebFetch " + string(in) + "]]"
}

// fetches is a model that answers "FETCH" followed by a JSON list of URLs
// with one message calling WebFetch for each, and otherwise plays Script.
func fetches(req scriptedmodel.Request) scriptedmodel.Reply {
	text, ok := strings.CutPrefix(req.LastUserText(), "FETCH ")
	if !ok || len(req.ToolResults()) > 0 {
		return scriptedmodel.Script(req)
	}
	var urls []string
	if err := json.Unmarshal([]byte(text), &urls); err != nil {
		return scriptedmodel.Text("script error: " + err.Error())
	}
	var calls []scriptedmodel.ReplyBlock
	for _, u := range urls {
		calls = append(calls, scriptedmodel.ReplyBlock{Name: "WebFetch", Input: map[string]string{"url": u, "prompt": "x"}})
	}
	return scriptedmodel.Reply{Blocks: calls}
}

// TestWebFetchLogThroughCLI has two sessions fetch at the same time,
// sebastian's with two WebFetch calls in one message: every request is
// logged with its person, escaped, and pushed, in one linear history on
// top of another clone's commit.
func TestWebFetchLogThroughCLI(t *testing.T) {
	t.Parallel()
	env := clitest.New(t, fetches)
	root := env.VaultRoot
	remote := withRemote(t, root)
	otherClone(t, remote, "elsewhere.md") // the remote moved on before any session
	g := newGitSync(t, vault.GitConfig{Root: root})
	h := newHooks(t, root, g)

	evil := "https://example.com/b\n- [2026-01-01 00:00:00] (petra) [x](https://evil) `y`\r"
	calls := []struct {
		person string
		urls   []string
	}{
		{"sebastian", []string{"https://example.com/a", "https://example.com/c"}},
		{"petra", []string{evil}},
	}
	var wg sync.WaitGroup
	for i, c := range calls {
		s, rec := startSession(t, env, c.person, fmt.Sprintf("s%d", i), h, nil)
		urls, _ := json.Marshal(c.urls)
		wg.Go(func() {
			got := rec.Turn(t, s, "FETCH "+string(urls))
			if !strings.HasPrefix(got, "RESULT<<") || strings.Count(got, " | ") != len(c.urls)-1 {
				t.Errorf("%s's turn text = %q", c.person, got)
			}
		})
	}
	wg.Wait()

	lines := strings.Split(strings.TrimSuffix(readFile(t, filepath.Join(root, hooks.WebFetchLogPath)), "\n"), "\n")
	slices.Sort(lines)
	want := []string{
		// The CLI parses the URL as WHATWG URLs are parsed, which drops
		// line breaks before the hook sees it (TestLogEntry covers line
		// breaks that do arrive); the markdown is escaped here.
		"- [2026-01-18 14:32:15] (petra) https://example.com/b- \\[2026-01-01 00:00:00\\] (petra) \\[x\\](https://evil) \\`y\\`",
		"- [2026-01-18 14:32:15] (sebastian) https://example.com/a",
		"- [2026-01-18 14:32:15] (sebastian) https://example.com/c",
	}
	if !slices.Equal(lines, want) {
		t.Fatalf("log lines:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	// Everything is pushed, in one linear history on top of the commit
	// another clone made.
	remoteLog := git(t, remote, "log", "--format=%s", "main")
	if n := strings.Count(remoteLog, "Log WebFetch request"); n != 3 {
		t.Fatalf("remote has %d log commits:\n%s", n, remoteLog)
	}
	if !strings.Contains(remoteLog, "elsewhere: elsewhere.md") {
		t.Fatalf("the other clone's commit was lost:\n%s", remoteLog)
	}
	if git(t, root, "rev-parse", "HEAD") != git(t, remote, "rev-parse", "main") {
		t.Fatal("the vault and the remote differ")
	}
	if m := git(t, remote, "rev-list", "--merges", "--count", "main"); m != "0" {
		t.Fatalf("%s merge commits; want a linear history", m)
	}
}

func TestWebFetchLogFailureDoesNotBreakTheTurn(t *testing.T) {
	t.Parallel()
	env := clitest.New(t, nil)
	root := env.VaultRoot
	withRemote(t, root)
	git(t, root, "remote", "set-url", "origin", filepath.Join(t.TempDir(), "gone.git"))
	g := newGitSync(t, vault.GitConfig{Root: root, Timeout: 5 * time.Second})
	h := newHooks(t, root, g)
	s, rec := startSession(t, env, "sebastian", "s1", h, nil)

	if got := rec.Turn(t, s, webFetch("https://example.com/a")); !strings.HasPrefix(got, "RESULT<<") {
		t.Fatalf("turn text = %q", got)
	}
	if n := rec.Notices(); len(n) != 1 || !strings.Contains(n[0], "WebFetch") {
		t.Fatalf("notices = %q", n)
	}
	if got := readFile(t, filepath.Join(root, hooks.WebFetchLogPath)); got != "- [2026-01-18 14:32:15] (sebastian) https://example.com/a\n" {
		t.Fatalf("log = %q", got)
	}
	if got := git(t, root, "log", "-1", "--format=%s"); !strings.HasPrefix(got, "Log WebFetch request") {
		t.Fatalf("the entry was not committed locally: last commit %q", got)
	}
}

func TestVaultGuardAndCommitTurnThroughCLI(t *testing.T) {
	t.Parallel()
	env := clitest.New(t, nil)
	root := env.VaultRoot
	v := env.Vault("sebastian")
	const secret = "PETRA-SECRET-7f3a"
	outside := t.TempDir()
	writeFile(t, filepath.Join(root, "petra", "secret.md"), secret+"\n")
	writeFile(t, filepath.Join(outside, "private.md"), secret+" outside\n")
	writeFile(t, filepath.Join(v, "notes.md"), "sebastian's notes\n")
	if err := os.Symlink(filepath.Join(root, "petra", "secret.md"), filepath.Join(v, "leak.md")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(v, "outdir")); err != nil {
		t.Fatal(err)
	}
	git(t, root, "add", ".")
	git(t, root, "commit", "-q", "-m", "start")
	g := newGitSync(t, vault.GitConfig{Root: root})
	h := newHooks(t, root, g)
	s, rec := startSession(t, env, "sebastian", "guard-1", h, nil)

	denied := []struct {
		name, directive, untouched string
	}{
		{"absolute elsewhere", `[[tool Read {"file_path":"/etc/passwd"}]]`, ""},
		{"other person's vault", `[[tool Read {"file_path":"../petra/secret.md"}]]`, ""},
		{"dotdot escape", `[[tool Read {"file_path":"sub/../../petra/secret.md"}]]`, ""},
		{"symlink out", `[[tool Read {"file_path":"leak.md"}]]`, ""},
		{"symlinked directory", `[[tool Read {"file_path":"outdir/private.md"}]]`, ""},
		{"write under symlinked directory", `[[tool Write {"file_path":"outdir/new.md","content":"x"}]]`, filepath.Join(outside, "new.md")},
		{"new file in other person's vault", `[[tool Write {"file_path":"` + filepath.Join(root, "petra", "planted.md") + `","content":"x"}]]`, filepath.Join(root, "petra", "planted.md")},
		{"vault settings", `[[tool Write {"file_path":".claude/settings.json","content":"{\"hooks\":{}}"}]]`, filepath.Join(v, ".claude", "settings.json")},
		{"glob elsewhere", `[[tool Glob {"pattern":"/etc/*"}]]`, ""},
		{"grep other person", `[[tool Grep {"pattern":"SECRET","path":"../petra","output_mode":"content"}]]`, ""},
	}
	before := map[string]string{}
	for _, d := range denied {
		if d.untouched != "" {
			b, _ := os.ReadFile(d.untouched)
			before[d.untouched] = string(b)
		}
	}
	for _, d := range denied {
		got := rec.Turn(t, s, d.directive)
		if !strings.Contains(got, "Access denied") {
			t.Errorf("%s: the model saw %q, want a denial", d.name, got)
		}
		if d.untouched != "" {
			b, _ := os.ReadFile(d.untouched)
			if string(b) != before[d.untouched] {
				t.Errorf("%s: %s changed to %q", d.name, d.untouched, b)
			}
		}
	}
	for _, r := range env.Model.Requests() {
		if strings.Contains(string(r.Raw), secret) || strings.Contains(string(r.Raw), "root:x:0:0") {
			t.Fatal("protected content reached the model")
		}
	}

	// Inside the vault everything works.
	if got := rec.Turn(t, s, `[[tool Read {"file_path":"notes.md"}]]`); !strings.Contains(got, "sebastian's notes") {
		t.Fatalf("read inside the vault: %q", got)
	}
	if got := rec.Turn(t, s, `[[tool Glob {"pattern":"**/*.md"}]]`); !strings.Contains(got, "notes.md") {
		t.Fatalf("glob inside the vault: %q", got)
	}
	rec.Turn(t, s, `[[tool Write {"file_path":"new.md","content":"written by the turn\n"}]]`)
	if got := readFile(t, filepath.Join(v, "new.md")); got != "written by the turn\n" {
		t.Fatalf("write inside the vault: %q", got)
	}

	// End of turn: only sebastian's folder is committed.
	writeFile(t, filepath.Join(root, "petra", "draft.md"), "petra is typing\n")
	if err := h.CommitTurn(context.Background(), "sebastian", "guard-1"); err != nil {
		t.Fatal(err)
	}
	if got := git(t, root, "show", "--name-only", "--format=%s", "HEAD"); got != "Session guard-1: changes in sebastian's vault\n\nsebastian/new.md" {
		t.Fatalf("turn commit = %q", got)
	}
	if got := git(t, root, "status", "--porcelain"); got != "?? petra/draft.md" {
		t.Fatalf("status after the turn commit = %q", got)
	}
	head := git(t, root, "rev-parse", "HEAD")
	if err := h.CommitTurn(context.Background(), "sebastian", "guard-1"); err != nil {
		t.Fatal(err)
	}
	if git(t, root, "rev-parse", "HEAD") != head {
		t.Fatal("a turn without changes made a commit")
	}
}
