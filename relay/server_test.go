package relay_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/clientevent"
	"github.com/majorhq/major/clitest"
	"github.com/majorhq/major/httpapi"
	"github.com/majorhq/major/httpapi/httpapitest"
	"github.com/majorhq/major/relay"
	"github.com/majorhq/major/relay/relaytest"
	"github.com/majorhq/major/scriptedmodel"
	"github.com/majorhq/major/sessionstore"
	"github.com/majorhq/major/supervisor"
)

const token = "t0ken-sebastian-and-petra"

type harness struct {
	httpapitest.Client
	env      *clitest.Env
	url      string
	sessions *relay.Registry
	// fakes are the chats' CLIs in a newFakeHarness.
	fakes *relaytest.Launcher
	stop  func()
	once  sync.Once
}

type harnessOpts struct {
	askTimeout time.Duration
	askTools   []string
	// confirmTools are the askTools confirmed in chat when no client can
	// answer.
	confirmTools []string
	ping         time.Duration
	// env reuses a test world (a restarted server); nil makes a new one.
	env      *clitest.Env
	stateDir string
	pool     *supervisor.Pool
	stall    time.Duration
	subBuf   int
	turnEnd  func(ctx context.Context, person, sessionID string) string
	// cliEnv are more variables for the CLI (a later one of the same name
	// wins); noKey leaves out every Anthropic credential.
	cliEnv []string
	noKey  bool
	// maxSessions bounds each person's sessions; 0: no limit.
	maxSessions int
	cors        []string
	// paths are the server's folders, hidden from clients; the real
	// CLI's harness hides its test's as the server hides its own.
	paths clientevent.ServerPaths
}

func newHarness(tb testing.TB, o harnessOpts) *harness {
	tb.Helper()
	log := zerolog.New(zerolog.NewTestWriter(tb)).Level(zerolog.WarnLevel)
	env := o.env
	if env == nil {
		env = clitest.New(tb, nil)
	}
	childEnv := env.ChildEnv()
	if o.noKey {
		childEnv = withoutCredentials(childEnv)
	}
	childEnv = append(childEnv, o.cliEnv...)
	launch := relay.LauncherFunc(func(p relay.SessionParams) relay.CLI {
		return supervisor.NewCLI(supervisor.CLIConfig{
			ID: p.ID, Person: p.Person, Dir: env.Vault(p.Person), CLISessionID: p.CLISessionID,
			Spec: supervisor.Spec{
				Binary:         env.Binary,
				Sandbox:        env.Sandbox(tb, p.Person),
				Env:            childEnv,
				SystemPrompt:   "You are a test assistant.",
				Tools:          []string{"Read", "Write", "Edit", "Glob", "Grep", "AskUserQuestion"},
				AllowedTools:   []string{"Read", "Glob", "Grep"},
				PermissionMode: "default",
				Grace:          2 * time.Second,
			},
			Handlers: func(*supervisor.CLI) supervisor.Handlers {
				return supervisor.Handlers{CanUseTool: p.Chat.CanUseTool(o.policy())}
			},
			Sink:         p.Sink,
			Pool:         o.pool,
			StallTimeout: o.stall,
			Logger:       log,
		})
	})
	o.paths = clientevent.ServerPaths{VaultRoot: env.VaultRoot, Home: env.Home, Hidden: []string{os.TempDir()}}
	h := serve(tb, o, launch, log)
	h.env = env
	return h
}

// policy is how the harness's chats answer the CLI's tool requests.
func (o harnessOpts) policy() relay.AskPolicy {
	ask, confirm := map[string]bool{}, map[string]bool{}
	for _, t := range o.askTools {
		ask[t] = true
	}
	for _, t := range o.confirmTools {
		confirm[t] = true
	}
	return relay.AskPolicy{
		Timeout: o.askTimeout, Ask: func(tool string, _ json.RawMessage) bool { return ask[tool] },
		ConfirmInChat: func(tool string) bool { return confirm[tool] },
	}
}

// newFakeHarness serves chats that run on fake CLIs (relaytest) behind the
// HTTP API, for what is the chats' own logic rather than the CLI's. The
// fakes take their slots from o.pool and play the scripted model's part:
// "[[say X]]" is answered with X at once; "[[ask]]", "[[ask-multi]]" and
// "[[tool NAME INPUT]]" ask the chat (with o's policy) and end the turn
// with what the model would see of the answer (toolOutcome); any other
// message keeps its turn open until the test ends it through h.fake.
func newFakeHarness(tb testing.TB, o harnessOpts) *harness {
	tb.Helper()
	log := zerolog.New(zerolog.NewTestWriter(tb)).Level(zerolog.WarnLevel)
	// The tool requests wait in the background, as the CLI's do; they
	// end, and are waited for, before the sessions close.
	ctx, cancel := context.WithCancel(context.Background())
	var calls sync.WaitGroup
	policy := o.policy()
	l := &relaytest.Launcher{
		New: func(relay.SessionParams) *relaytest.CLI {
			f := &relaytest.CLI{}
			f.AutoReply = func(message string) (string, bool) {
				if tool, input, ok := toolCall(message); ok {
					calls.Add(1)
					go func() {
						defer calls.Done()
						res, err := f.UseTool(ctx, tool, input)
						switch {
						case err != nil:
							f.Fail(err)
						case res.Interrupt:
							// The chat denied the tool because it
							// interrupts the turn: the interrupt
							// that follows ends it.
						default:
							f.Reply(toolOutcome(res))
						}
					}()
					return "", false
				}
				return sayReply(message)
			}
			return f
		},
		Policy: &policy,
		Pool:   o.pool,
	}
	h := serve(tb, o, l, log)
	tb.Cleanup(func() { cancel(); calls.Wait() })
	h.fakes = l
	return h
}

// toolCall is the tool a fake is asked to call by the scripted model's
// "[[ask]]", "[[ask-multi]]" and "[[tool NAME INPUT]]".
func toolCall(message string) (tool string, input any, ok bool) {
	switch message {
	case "[[ask]]", "[[ask-multi]]":
		return "AskUserQuestion", scriptedmodel.AskInput(message == "[[ask-multi]]"), true
	}
	call, ok := strings.CutPrefix(message, "[[tool ")
	if !ok {
		return "", nil, false
	}
	tool, in, _ := strings.Cut(strings.TrimSuffix(call, "]]"), " ")
	return tool, json.RawMessage(in), json.Valid([]byte(in))
}

// toolOutcome is what the model would see of a tool request's answer:
// the answers to its questions as "question"="answer", or that the tool
// ran, or the denial's message.
func toolOutcome(res supervisor.PermissionResult) string {
	if !res.Allow {
		return res.Message
	}
	var in struct {
		Answers map[string]string `json:"answers"`
	}
	_ = json.Unmarshal(res.UpdatedInput, &in)
	if len(in.Answers) == 0 {
		return "the tool ran"
	}
	var pairs []string
	for q, a := range in.Answers {
		pairs = append(pairs, fmt.Sprintf("%q=%q", q, a))
	}
	slices.Sort(pairs)
	return strings.Join(pairs, ", ")
}

// sayReply ends a fake's turn at once with X for "[[say X]]", and keeps
// any other turn open.
func sayReply(message string) (string, bool) {
	said, ok := strings.CutPrefix(message, "[[say ")
	if !ok {
		return "", false
	}
	return strings.CutSuffix(said, "]]")
}

// fake is the fake CLI of session id, once its chat has one.
func (h *harness) fake(tb testing.TB, id string) *relaytest.CLI {
	tb.Helper()
	if h.fakes == nil {
		tb.Fatal("not a fake harness")
	}
	f := h.fakes.CLI(id)
	if f == nil {
		tb.Fatalf("session %s has no CLI", id)
	}
	return f
}

// serve runs the sessions of launch behind the HTTP API.
func serve(tb testing.TB, o harnessOpts, launch relay.Launcher, log zerolog.Logger) *harness {
	tb.Helper()
	var store *sessionstore.Store
	if o.stateDir != "" {
		var err error
		if store, err = sessionstore.New(o.stateDir, log); err != nil {
			tb.Fatal(err)
		}
	}
	sessions, err := relay.NewRegistry(relay.RegistryConfig{Launcher: launch, Store: store, TurnEnd: o.turnEnd, MaxPerPerson: o.maxSessions,
		ServerPaths: o.paths, Logger: log})
	if err != nil {
		tb.Fatal(err)
	}
	auth, err := httpapi.NewAuth(map[string][]string{token: {"sebastian", "petra"}, "only-petra": {"petra"}})
	if err != nil {
		tb.Fatal(err)
	}
	done := make(chan struct{})
	srv := httptest.NewServer(httpapi.NewServer(httpapi.Config{
		Auth: auth, Registry: sessions, Logger: log, PingInterval: o.ping, Done: done, SubscriberBuffer: o.subBuf,
		CORSOrigins: o.cors,
	}))
	h := &harness{Client: httpapitest.Client{URL: srv.URL, Token: token}, url: srv.URL, sessions: sessions}
	h.stop = func() {
		close(done)
		srv.Close()
		sessions.Close()
	}
	tb.Cleanup(func() { h.once.Do(h.stop) })
	return h
}

// shutdown stops the server as a restart would (idempotent).
func (h *harness) shutdown() { h.once.Do(h.stop) }

// assertUsable runs one more turn in the session (after an interrupt, a
// crash, bad input, ...) and checks it answers normally.
func (h *harness) assertUsable(tb testing.TB, id string) {
	tb.Helper()
	_, evs := h.ChatStream(tb, "sebastian", "", httpapitest.JSONBody(map[string]any{"message": "[[say still usable]]", "session_id": id}))
	httpapitest.CheckCompat(tb, evs)
	if got := httpapitest.StreamText(evs); got != "still usable" {
		tb.Fatalf("the session is not usable any more: %v", evs)
	}
}

// TestCompatChatThroughCLI runs one conversation on one real CLI process
// through the compat endpoints and proves, step by step: a form-encoded
// chat-stream shows a tool call as the seed's status, tool and text lines;
// a JSON one continues the session and the model sees its history; the
// non-streaming chat answers with the whole history; a second client
// interrupts a streaming turn (a message queued behind it is cancelled and
// never runs) and the session takes the next turn; a failing model ends
// the stream with an error line and the chat with 502; the compat history
// marks the interrupted and the failed turn while the rich history has
// every message with a stable id, the tool call with its input and
// result, and each turn's outcome, cost and duration; clearing the
// session forgets it.
func TestCompatChatThroughCLI(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	if err := os.WriteFile(filepath.Join(h.env.Vault("sebastian"), "notes.md"), []byte("buy oat milk"), 0o644); err != nil {
		t.Fatal(err)
	}
	const read = `[[tool Read {"file_path":"notes.md"}]]`
	var sid string

	t.Run("form-encoded tool turn", func(t *testing.T) {
		// Form-encoded, as the Android and web clients send it.
		form := url.Values{"message": {read}}.Encode()
		status, evs := h.ChatStream(t, "sebastian", "application/x-www-form-urlencoded", form)
		if status != http.StatusOK {
			t.Fatalf("status %d", status)
		}
		httpapitest.CheckCompat(t, evs)
		want := []string{"status:Running tool: Read", "tool:Read", "status:Tool finished: Read", "text", "done"}
		var got []string
		for _, ev := range evs {
			switch typ := httpapitest.Str(ev, "type"); typ {
			case "ping": // while the CLI starts on a loaded machine
			case "status":
				got = append(got, "status:"+httpapitest.Str(ev, "message"))
			case "tool":
				got = append(got, "tool:"+httpapitest.Str(ev, "name"))
				if string(ev["input"]) != `{"file_path":"notes.md"}` {
					t.Fatalf("tool input %s", ev["input"])
				}
			default:
				got = append(got, typ)
			}
		}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Fatalf("events:\n got %v\nwant %v", got, want)
		}
		sid = httpapitest.Str(evs[len(evs)-1], "session_id")
	})
	if sid == "" {
		t.Fatal("no session to continue")
	}

	t.Run("JSON continues the session", func(t *testing.T) {
		status, evs := h.ChatStream(t, "sebastian", "application/json", httpapitest.JSONBody(map[string]any{"message": "[[recall]]", "session_id": sid}))
		if status != http.StatusOK {
			t.Fatalf("status %d", status)
		}
		httpapitest.CheckCompat(t, evs)
		if got := httpapitest.Str(evs[len(evs)-1], "session_id"); got != sid {
			t.Fatalf("session changed: %s -> %s", sid, got)
		}
		if got, want := httpapitest.StreamText(evs), "HISTORY: "+read+" | [[recall]]"; got != want {
			t.Fatalf("text %q, want %q", got, want)
		}
		code, hist := h.Call(t, "GET", "/api/claude/history?session_id="+sid, "sebastian", nil)
		if code != 200 || len(hist["messages"].([]any)) != 4 {
			t.Fatalf("history %d %v", code, hist)
		}
	})

	t.Run("non-streaming chat", func(t *testing.T) {
		code, out := h.Call(t, "POST", "/api/claude/chat", "sebastian", map[string]any{"message": "[[say plain answer]]", "session_id": sid})
		if code != 200 || out["response"] != "plain answer" || out["session_id"] != sid || len(out["history"].([]any)) != 6 {
			t.Fatalf("chat: %d %v", code, out)
		}
	})

	t.Run("interrupt from a second client", func(t *testing.T) {
		interruptFromSecondClient(t, h, sid)
	})

	t.Run("model error", func(t *testing.T) {
		_, evs := h.ChatStream(t, "sebastian", "", httpapitest.JSONBody(map[string]any{"message": "[[status 400]]", "session_id": sid}))
		httpapitest.CheckCompat(t, evs)
		last := evs[len(evs)-1]
		if httpapitest.Str(last, "type") != "error" || httpapitest.Str(last, "message") == "" {
			t.Fatalf("last event %v", last)
		}
		code, out := h.Call(t, "POST", "/api/claude/chat", "sebastian", map[string]any{"message": "[[status 400]]", "session_id": sid})
		if code != http.StatusBadGateway || out["error"] == "" {
			t.Fatalf("chat with a failing model: %d %v", code, out)
		}
	})

	// The turns so far: the tool call, recall, the plain answer, the
	// interrupted one, the one after it, and two failed ones.
	t.Run("history tells the truth", func(t *testing.T) {
		checkHistory(t, h, sid, read, 7, 4, 6)
	})

	t.Run("clear", func(t *testing.T) {
		if code, out := h.Call(t, "POST", "/api/claude/clear", "sebastian", map[string]any{"session_id": sid}); code != 200 || out["cleared"] != true {
			t.Fatalf("clear: %d %v", code, out)
		}
		if code, _ := h.Call(t, "GET", "/api/claude/history?session_id="+sid, "sebastian", nil); code != 404 {
			t.Fatalf("history after clear: %d", code)
		}
	})
}

// A person neither reads, continues nor clears another person's session:
// a chat-stream naming it starts a new session of their own.
func TestSessionsArePerPerson(t *testing.T) {
	t.Parallel()
	h := newFakeHarness(t, harnessOpts{})
	_, evs := h.ChatStream(t, "sebastian", "", httpapitest.JSONBody(map[string]any{"message": "[[say hello sebastian]]"}))
	sid := httpapitest.Str(evs[len(evs)-1], "session_id")
	if code, _ := h.Call(t, "GET", "/api/claude/history?session_id="+sid, "petra", nil); code != 404 {
		t.Fatalf("petra reading sebastian's history: %d", code)
	}
	_, evs = h.ChatStream(t, "petra", "", httpapitest.JSONBody(map[string]any{"message": "[[say hello petra]]", "session_id": sid}))
	other := httpapitest.Str(evs[len(evs)-1], "session_id")
	if other == sid || other == "" {
		t.Fatal("petra continued sebastian's session")
	}
	if got := h.fake(t, other).Sent(); len(got) != 1 || got[0] != "[[say hello petra]]" {
		t.Fatalf("petra's new session's CLI got %q", got)
	}
	if got := h.fake(t, sid).Sent(); len(got) != 1 {
		t.Fatalf("sebastian's CLI got %q", got)
	}
	if code, out := h.Call(t, "POST", "/api/claude/clear", "petra", map[string]any{"session_id": sid}); code != 200 || out["cleared"] != false {
		t.Fatalf("petra clearing sebastian's session: %d %v", code, out)
	}
	if code, _ := h.Call(t, "GET", "/api/claude/history?session_id="+sid, "sebastian", nil); code != 200 {
		t.Fatalf("sebastian's history after petra's clear: %d", code)
	}
}

func seqOf(tb testing.TB, ev map[string]json.RawMessage) int64 {
	var n int64
	if err := json.Unmarshal(ev["seq"], &n); err != nil {
		tb.Fatalf("event without seq: %v", ev)
	}
	return n
}

// interruptFromSecondClient streams a long turn in session id and, from
// another client, queues a message and cancels it, lists the sessions and
// interrupts the turn: the stream ends at once with "Interrupted", a
// second interrupt finds nothing to stop, and the session takes the next
// turn.
func interruptFromSecondClient(t *testing.T, h *harness, id string) {
	t.Helper()
	resp := h.Request(t, "POST", "/api/claude/chat-stream", "sebastian", "", httpapitest.JSONBody(map[string]any{"message": "[[slow 300 50]]", "session_id": id}))
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var evs []map[string]json.RawMessage
	for sc.Scan() { // wait for the first text
		var m map[string]json.RawMessage
		_ = json.Unmarshal(sc.Bytes(), &m)
		evs = append(evs, m)
		if httpapitest.Str(m, "type") == "text" {
			break
		}
	}
	// While the turn runs, another message waits; cancelled, it never runs.
	code, out := h.Call(t, "POST", "/api/claude/sessions/"+id+"/messages", "sebastian", map[string]any{"message": "hi"})
	if code != http.StatusAccepted || out["queued"] != true {
		t.Fatalf("message to a busy session: %d %v", code, out)
	}
	if code, out := h.Call(t, "DELETE", "/api/claude/sessions/"+id+"/queue/"+out["queue_id"].(string), "sebastian", nil); code != 200 {
		t.Fatalf("cancel the waiting message: %d %v", code, out)
	}
	if code, _ := h.Call(t, "GET", "/api/claude/sessions", "sebastian", nil); code != 200 {
		t.Fatal("sessions list")
	}
	if code, out := h.Call(t, "POST", "/api/claude/sessions/"+id+"/interrupt", "sebastian", nil); code != 200 {
		t.Fatalf("interrupt: %d %v", code, out)
	}
	evs = append(evs, httpapitest.Lines(t, resp.Body)...)
	// The stream ended at the interrupt, well before the 300th tick.
	if ticks := strings.Count(httpapitest.StreamText(evs), "tick"); ticks >= 300 {
		t.Fatalf("the stream ran to its end (%d ticks) despite the interrupt", ticks)
	}
	httpapitest.CheckCompat(t, evs)
	if n := len(evs); httpapitest.Str(evs[n-1], "type") != "done" || httpapitest.Str(evs[n-2], "message") != "Interrupted" {
		t.Fatalf("end of interrupted stream: %v", evs[max(0, n-3):])
	}
	if code, _ := h.Call(t, "POST", "/api/claude/sessions/"+id+"/interrupt", "sebastian", nil); code != http.StatusConflict {
		t.Fatalf("interrupt when idle: %d", code)
	}
	h.assertUsable(t, id)
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
