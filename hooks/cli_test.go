package hooks_test

import (
	"context"
	"encoding/json"
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

// startUnsandboxed is startSession with the CLI on the host, outside the
// sandbox: only for showing what the CLI would do with nothing but its
// flags between it and the vault.
func startUnsandboxed(tb testing.TB, env *clitest.Env, person, id string, h *hooks.Hooks, extraArgs []string) (*supervisor.CLI, *clitest.Recorder) {
	tb.Helper()
	return startSessionIn(tb, env, person, id, extraArgs, h.Matchers(), h.Handle, nil)
}

// startSessionHandled is startSession whose hook callbacks (registered by
// matchers) go to handle.
func startSessionHandled(tb testing.TB, env *clitest.Env, person, id string, extraArgs []string,
	matchers map[string][]supervisor.HookMatcher,
	handle func(context.Context, hooks.Caller, *supervisor.ControlRequest) (json.RawMessage, error)) (*supervisor.CLI, *clitest.Recorder) {
	tb.Helper()
	return startSessionIn(tb, env, person, id, extraArgs, matchers, handle, env.Sandbox(tb, person))
}

// startSessionIn is startSessionHandled in the sandbox box (nil: none).
func startSessionIn(tb testing.TB, env *clitest.Env, person, id string, extraArgs []string,
	matchers map[string][]supervisor.HookMatcher,
	handle func(context.Context, hooks.Caller, *supervisor.ControlRequest) (json.RawMessage, error), box []string) (*supervisor.CLI, *clitest.Recorder) {
	tb.Helper()
	rec := clitest.NewRecorder()
	s := supervisor.NewCLI(supervisor.CLIConfig{
		ID: id, Person: person, Dir: env.Vault(person),
		Spec: supervisor.Spec{
			Binary:         env.Binary,
			Sandbox:        box,
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

// toolCall is one tool call of a model message.
type toolCall struct {
	Name  string `json:"name"`
	Input any    `json:"input"`
}

// callsModel is Script, except that it answers "CALLS" followed by a JSON
// list of toolCalls with one message making all of them, as a model may.
func callsModel(req scriptedmodel.Request) scriptedmodel.Reply {
	text, ok := strings.CutPrefix(req.LastUserText(), "CALLS ")
	if !ok || len(req.ToolResults()) > 0 {
		return scriptedmodel.Script(req)
	}
	var calls []toolCall
	if err := json.Unmarshal([]byte(text), &calls); err != nil {
		return scriptedmodel.Text("script error: " + err.Error())
	}
	var blocks []scriptedmodel.ReplyBlock
	for _, c := range calls {
		blocks = append(blocks, scriptedmodel.ReplyBlock{Name: c.Name, Input: c.Input})
	}
	return scriptedmodel.Reply{Blocks: blocks}
}

// callsTurn runs a turn of s in which the model makes calls in one message
// and returns what the model saw of each, in order, from the request that
// carried the results (model is the session's; its other turns must not
// run meanwhile).
func callsTurn(tb testing.TB, model *scriptedmodel.Server, s *supervisor.CLI, rec *clitest.Recorder, calls []toolCall) []string {
	tb.Helper()
	text, err := json.Marshal(calls)
	if err != nil {
		tb.Fatal(err)
	}
	rec.Turn(tb, s, "CALLS "+string(text))
	reqs := model.Requests()
	last := reqs[len(reqs)-1]
	results := map[string]string{}
	for _, b := range last.ToolResults() {
		results[b.ToolUseID] = b.ResultText()
	}
	var made []scriptedmodel.Block
	for _, m := range last.Messages {
		for _, b := range m.Content {
			if m.Role == "assistant" && b.Type == "tool_use" {
				made = append(made, b)
			}
		}
	}
	made = made[max(0, len(made)-len(calls)):]
	if len(made) != len(calls) {
		tb.Fatalf("the model's message held %d tool calls, want %d", len(made), len(calls))
	}
	out := make([]string, len(calls))
	for i, c := range calls {
		if made[i].Name != c.Name {
			tb.Fatalf("call %d is %s, want %s", i, made[i].Name, c.Name)
		}
		got, ok := results[made[i].ID]
		if !ok {
			tb.Fatalf("no result for call %d (%s)", i, c.Name)
		}
		out[i] = got
	}
	return out
}

// webFetchLogThroughCLI has sebastian's and petra's sessions (on root,
// pushing to remote, models playing callsModel) fetch at the same time,
// sebastian's with two WebFetch calls in one message, after another clone
// moved the remote on: every request is logged with its person, escaped,
// and pushed, in one linear history on top of the other clone's commit.
func webFetchLogThroughCLI(t *testing.T, root, remote string, sessions map[string]*supervisor.CLI, recs map[string]*clitest.Recorder) {
	otherClone(t, remote, "elsewhere.md")
	evil := "https://example.com/b\n- [2026-01-01 00:00:00] (petra) [x](https://evil) `y`\r"
	calls := []struct {
		person string
		urls   []string
	}{
		{"sebastian", []string{"https://example.com/a", "https://example.com/c"}},
		{"petra", []string{evil}},
	}
	var wg sync.WaitGroup
	for _, c := range calls {
		s, rec := sessions[c.person], recs[c.person]
		var fetches []toolCall
		for _, u := range c.urls {
			fetches = append(fetches, toolCall{"WebFetch", map[string]string{"url": u, "prompt": "x"}})
		}
		text, _ := json.Marshal(fetches)
		wg.Go(func() {
			got := rec.Turn(t, s, "CALLS "+string(text))
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

// TestVaultGuardAndCommitTurnThroughCLI runs one session through the real
// CLI: the vault guard denies every way out of the person's folder and
// leaves protected files untouched, while work inside it goes on; the
// turn commit takes only the person's folder, and a turn without changes
// makes no commit. Last, with a remote that cannot be reached, a WebFetch
// is still answered: its log entry is committed locally and the session
// gets one notice.
func TestVaultGuardAndCommitTurnThroughCLI(t *testing.T) {
	t.Parallel()
	env := clitest.New(t, callsModel)
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

	read := func(p string) toolCall { return toolCall{"Read", map[string]string{"file_path": p}} }
	denied := []struct {
		name      string
		call      toolCall
		untouched string
	}{
		{"absolute elsewhere", read("/etc/passwd"), ""},
		{"other person's vault", read("../petra/secret.md"), ""},
		{"dotdot escape", read("sub/../../petra/secret.md"), ""},
		{"symlink out", read("leak.md"), ""},
		{"symlinked directory", read("outdir/private.md"), ""},
		{"write under symlinked directory", toolCall{"Write", map[string]string{"file_path": "outdir/new.md", "content": "x"}}, filepath.Join(outside, "new.md")},
		{"new file in other person's vault", toolCall{"Write", map[string]string{"file_path": filepath.Join(root, "petra", "planted.md"), "content": "x"}}, filepath.Join(root, "petra", "planted.md")},
		{"vault settings", toolCall{"Write", map[string]string{"file_path": ".claude/settings.json", "content": `{"hooks":{}}`}}, filepath.Join(v, ".claude", "settings.json")},
		{"glob elsewhere", toolCall{"Glob", map[string]string{"pattern": "/etc/*"}}, ""},
		{"grep other person", toolCall{"Grep", map[string]string{"pattern": "SECRET", "path": "../petra", "output_mode": "content"}}, ""},
	}
	before := map[string]string{}
	var calls []toolCall
	for _, d := range denied {
		if d.untouched != "" {
			b, _ := os.ReadFile(d.untouched)
			before[d.untouched] = string(b)
		}
		calls = append(calls, d.call)
	}
	// All in one model message.
	for i, got := range callsTurn(t, env.Model, s, rec, calls) {
		d := denied[i]
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
	if got := git(t, root, "show", "--name-only", "--format=%s", "HEAD"); got != "sebastian: 1 note changed (new.md)\n\nsebastian/new.md" {
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

	t.Run("web fetch log failure does not break the turn", func(t *testing.T) {
		git(t, root, "remote", "add", "origin", filepath.Join(t.TempDir(), "gone.git"))
		git(t, root, "config", "branch.main.remote", "origin")
		git(t, root, "config", "branch.main.merge", "refs/heads/main")
		notices := len(rec.Notices())
		if got := rec.Turn(t, s, webFetch("https://example.com/a")); !strings.HasPrefix(got, "RESULT<<") {
			t.Fatalf("turn text = %q", got)
		}
		if n := rec.Notices()[notices:]; len(n) != 1 || !strings.Contains(n[0], "WebFetch") {
			t.Fatalf("notices = %q", n)
		}
		if got := readFile(t, filepath.Join(root, hooks.WebFetchLogPath)); got != "- [2026-01-18 14:32:15] (sebastian) https://example.com/a\n" {
			t.Fatalf("log = %q", got)
		}
		if got := git(t, root, "log", "-1", "--format=%s"); !strings.HasPrefix(got, "Log WebFetch request") {
			t.Fatalf("the entry was not committed locally: last commit %q", got)
		}
	})
}
