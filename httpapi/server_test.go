package httpapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/clientevent"
	"github.com/majorhq/major/httpapi"
	"github.com/majorhq/major/httpapi/httpapitest"
	"github.com/majorhq/major/notify"
	"github.com/majorhq/major/relay"
	"github.com/majorhq/major/relay/relaytest"
	"github.com/majorhq/major/supervisor"
	"github.com/majorhq/major/terminal"
)

// These tests run the HTTP API against the real router and the real
// session core, with a fake CLI under each chat: no claude process is
// started. What the CLI does is tested end to end in relay and cmd/major.

const token = "t0ken-sebastian-and-petra"

type harness struct {
	httpapitest.Client
	url      string
	sessions *relay.Registry
	fakes    *relaytest.Launcher
	// terminals are the server's terminals, when harnessOpts.terminals
	// asked for them.
	terminals *terminal.Manager
	// notify is the notifications, when harnessOpts.notify asked for
	// them.
	notify *notify.Service
}

type harnessOpts struct {
	cors []string
	// reply answers each turn's message (see scriptedReply); nil keeps
	// every turn open until it is interrupted. Either way a message
	// starting with [[recall]] is answered with "HISTORY: " and every
	// message the chat's CLI got, joined by " | ", as the scripted model
	// recalls a conversation.
	reply func(message string) (reply string, end bool)
	// usage is what each turn the fake ends reports using; limits bound
	// every person's spending.
	usage  *supervisor.Usage
	limits relay.Limits
	// setup adjusts each fake CLI.
	setup func(*relaytest.CLI)
	// ping is the streams' keep-alive interval; 0: the default.
	ping time.Duration
	// subBuf is each subscriber's buffer in events; 0: the default.
	subBuf int
	// terminals, when set, makes the server's terminals run this command
	// (a stand-in for the interactive claude) under a pty; with a
	// terminalPool each takes one of its slots.
	terminals    []string
	terminalPool *supervisor.Pool
	// wrap, when set, wraps the server's handler (to play a slow
	// connection or a busy machine).
	wrap func(http.Handler) http.Handler
	// paths are the server's folders, hidden from clients.
	paths clientevent.ServerPaths
	// notify, when set, configures the notifications (package notify),
	// with the fakes' chats asking as policy says.
	notify *notify.Config
	policy *relay.AskPolicy
}

func newHarness(tb testing.TB, o harnessOpts) *harness {
	tb.Helper()
	log := zerolog.New(zerolog.NewTestWriter(tb)).Level(zerolog.WarnLevel)
	fakes := &relaytest.Launcher{New: func(relay.SessionParams) *relaytest.CLI {
		f := &relaytest.CLI{Usage: o.usage}
		f.AutoReply = func(message string) (string, bool) {
			if strings.HasPrefix(message, "[[recall]]") {
				return "HISTORY: " + strings.Join(f.Sent(), " | "), true
			}
			if o.reply == nil {
				return "", false
			}
			return o.reply(message)
		}
		if o.setup != nil {
			o.setup(f)
		}
		return f
	}}
	fakes.Policy = o.policy
	var notifier *notify.Service
	if o.notify != nil {
		cfg := *o.notify
		cfg.Logger = log
		var err error
		if notifier, err = notify.New(cfg); err != nil {
			tb.Fatal(err)
		}
	}
	rcfg := relay.RegistryConfig{Launcher: fakes, Logger: log,
		Limits: func(string) relay.Limits { return o.limits }, ServerPaths: o.paths}
	if notifier != nil {
		rcfg.Notifier = notifier
	}
	sessions, err := relay.NewRegistry(rcfg)
	if err != nil {
		tb.Fatal(err)
	}
	auth, err := httpapi.NewAuth(map[string][]string{token: {"sebastian", "petra"}, "only-petra": {"petra"}})
	if err != nil {
		tb.Fatal(err)
	}
	done := make(chan struct{})
	cfg := httpapi.Config{Auth: auth, Registry: sessions, Logger: log, Done: done, CORSOrigins: o.cors,
		PingInterval: o.ping, SubscriberBuffer: o.subBuf, Notify: notifier}
	terminals := func() {}
	var manager *terminal.Manager
	if o.terminals != nil {
		manager = newTerminals(tb, o.terminals, o.terminalPool, log)
		cfg.Terminals, terminals = manager, manager.Close
	}
	var handler http.Handler = httpapi.NewServer(cfg)
	if o.wrap != nil {
		handler = o.wrap(handler)
	}
	srv := httptest.NewServer(handler)
	tb.Cleanup(func() {
		close(done)
		srv.Close()
		terminals()
		sessions.Close()
		if notifier != nil {
			notifier.Close()
		}
	})
	return &harness{Client: httpapitest.Client{URL: srv.URL, Token: token}, url: srv.URL, sessions: sessions, fakes: fakes, terminals: manager,
		notify: notifier}
}

// timesSent is how many times text reached a CLI as a message.
func (h *harness) timesSent(text string) int {
	n := 0
	for _, p := range []string{"sebastian", "petra"} {
		for _, info := range h.sessions.List(p) {
			for _, m := range h.fakes.CLI(info.ID).Sent() {
				if m == text {
					n++
				}
			}
		}
	}
	return n
}

// gone waits until no client follows session id any more: the server
// noticed that the clients that dropped are gone.
func (h *harness) gone(tb testing.TB, id string) {
	tb.Helper()
	chat, err := h.sessions.Get(id, "sebastian")
	if err != nil {
		tb.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); chat.Stream().Subscribers() > 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			tb.Fatalf("session %s still has %d subscribers", id, chat.Stream().Subscribers())
		}
	}
}

// turn waits until a chat's fake CLI runs a turn on message and returns
// that CLI, so the test can stream the answer and end the turn.
func (h *harness) turn(tb testing.TB, message string) *relaytest.CLI {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, p := range []string{"sebastian", "petra"} {
			for _, info := range h.sessions.List(p) {
				f := h.fakes.CLI(info.ID)
				if f == nil || f.State() == supervisor.StateIdle {
					continue
				}
				if sent := f.Sent(); len(sent) > 0 && sent[len(sent)-1] == message {
					return f
				}
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	tb.Fatalf("no turn runs on %q", message)
	return nil
}

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

func TestAuthAndBadInput(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{reply: scriptedReply})
	id := h.NewSession(t)
	big := strings.Repeat("x", httpapi.DefaultMaxBody+1)
	cases := []struct {
		name, method, path, auth, person, ctype, body string
		want                                          int
	}{
		{"no token", "POST", "/api/claude/chat-stream", "", "sebastian", "", `{"message":"hi"}`, 401},
		{"wrong token", "POST", "/api/claude/chat-stream", "Bearer nope", "sebastian", "", `{"message":"hi"}`, 401},
		{"not bearer", "POST", "/api/claude/chat-stream", "Basic " + token, "sebastian", "", `{"message":"hi"}`, 401},
		{"person not allowed", "POST", "/api/claude/chat-stream", "Bearer only-petra", "sebastian", "", `{"message":"hi"}`, 403},
		{"unknown person", "GET", "/api/claude/sessions", "Bearer " + token, "mallory", "", ``, 403},
		{"path person", "GET", "/api/claude/sessions", "Bearer " + token, "../petra", "", ``, 400},
		{"dotted person", "GET", "/api/claude/sessions", "Bearer " + token, "sebastian.bak", "", ``, 400},
		{"slash person", "GET", "/api/claude/sessions", "Bearer " + token, "a/b", "", ``, 400},
		{"upper person", "GET", "/api/claude/sessions", "Bearer " + token, "Sebastian", "", ``, 400},
		{"no person", "GET", "/api/claude/sessions", "Bearer " + token, "", "", ``, 400},
		{"malformed json", "POST", "/api/claude/chat-stream", "Bearer " + token, "sebastian", "application/json", `{"message":`, 400},
		{"json not object", "POST", "/api/claude/chat", "Bearer " + token, "sebastian", "application/json", `["hi"]`, 400},
		{"missing message", "POST", "/api/claude/chat-stream", "Bearer " + token, "sebastian", "", `{"session_id":"x"}`, 400},
		{"empty message", "POST", "/api/claude/chat", "Bearer " + token, "sebastian", "", `{"message":"   "}`, 400},
		{"empty form message", "POST", "/api/claude/chat-stream", "Bearer " + token, "sebastian", "application/x-www-form-urlencoded", `message=`, 400},
		{"empty body", "POST", "/api/claude/chat-stream", "Bearer " + token, "sebastian", "application/json", ``, 400},
		{"too large", "POST", "/api/claude/chat-stream", "Bearer " + token, "sebastian", "application/json", `{"message":"` + big + `"}`, 413},
		{"unsupported type", "POST", "/api/claude/chat", "Bearer " + token, "sebastian", "text/xml", `<m/>`, 415},
		{"unknown session events", "GET", "/api/claude/sessions/nope/events", "Bearer " + token, "sebastian", "", ``, 404},
		{"other person's session", "GET", "/api/claude/sessions/" + id + "/events", "Bearer " + token, "petra", "", ``, 404},
		{"unknown session message", "POST", "/api/claude/sessions/nope/messages", "Bearer " + token, "sebastian", "", `{"message":"hi"}`, 404},
		{"unknown session interrupt", "POST", "/api/claude/sessions/nope/interrupt", "Bearer " + token, "sebastian", "", ``, 404},
		{"unknown session answer", "POST", "/api/claude/sessions/nope/answer", "Bearer " + token, "sebastian", "", `{"request_id":"r","answers":{"q":"a"}}`, 404},
		{"history without id", "GET", "/api/claude/history", "Bearer " + token, "sebastian", "", ``, 400},
		{"bad after", "GET", "/api/claude/sessions/" + id + "/events?after=-1", "Bearer " + token, "sebastian", "", ``, 400},
		{"bad types", "GET", "/api/claude/sessions/" + id + "/events?types=a/b", "Bearer " + token, "sebastian", "", ``, 400},
		{"message to idle session, empty", "POST", "/api/claude/sessions/" + id + "/messages", "Bearer " + token, "sebastian", "", `{"message":""}`, 400},
		{"unknown answer request", "POST", "/api/claude/sessions/" + id + "/answer", "Bearer " + token, "sebastian", "", `{"request_id":"r","answers":{"q":"a"}}`, 404},
		{"answer without answers", "POST", "/api/claude/sessions/" + id + "/answer", "Bearer " + token, "sebastian", "", `{"request_id":"r"}`, 400},
		{"permission bad behavior", "POST", "/api/claude/sessions/" + id + "/permission", "Bearer " + token, "sebastian", "", `{"request_id":"r","behavior":"maybe"}`, 400},
		{"wrong method stream", "GET", "/api/claude/chat-stream", "Bearer " + token, "sebastian", "", ``, 405},
		{"wrong method history", "DELETE", "/api/claude/history", "Bearer " + token, "sebastian", "", ``, 405},
		{"no such endpoint", "GET", "/api/claude/nothing", "Bearer " + token, "sebastian", "", ``, 404},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, h.url+tc.path, strings.NewReader(tc.body))
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			if tc.person != "" {
				req.Header.Set("X-Notes-Person", tc.person)
			}
			if tc.ctype != "" {
				req.Header.Set("Content-Type", tc.ctype)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.want {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.want, b)
			}
			var out map[string]any
			if err := json.Unmarshal(b, &out); err != nil || len(out) != 1 || out["error"] == "" {
				t.Fatalf("error body is not {\"error\": ...}: %s", b)
			}
			if strings.Contains(string(b), token) {
				t.Fatal("the token leaked into a response")
			}
		})
	}
	// Nothing broke: the session still works.
	h.assertUsable(t, id)
}

func TestQueueBoundAndCancel(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{reply: scriptedReply})
	id := h.NewSession(t)
	ev, closeEv := h.Attach(t, id, "types=queued,queue_cancelled,turn_start,done")
	defer closeEv()
	base := "/api/claude/sessions/" + id
	if code, out := h.Call(t, "POST", base+"/messages", "sebastian", map[string]any{"message": "[[hang]]"}); code != http.StatusAccepted {
		t.Fatalf("first message: %d %v", code, out)
	}
	httpapitest.Until(t, ev, "turn_start")

	// A seed client's message waits in the queue: headers at once, a
	// status saying it waits, then pings.
	waiting := h.OpenStream(t, httpapitest.FormType, httpapitest.Form("[[say never]]", id))
	var ids []string
	for i := range queueBound - 1 {
		code, out := h.Call(t, "POST", base+"/messages", "sebastian", map[string]any{"message": "[[say q" + string(rune('a'+i)) + "]]"})
		if code != http.StatusAccepted || out["queue_id"] == nil {
			t.Fatalf("queued message %d: %d %v", i, code, out)
		}
		ids = append(ids, out["queue_id"].(string))
	}
	// The ninth waiting message is refused, for both kinds of client.
	resp := h.Request(t, "POST", "/api/claude/chat-stream", "sebastian", httpapitest.FormType, httpapitest.Form("[[say too many]]", id))
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var e map[string]any
	if resp.StatusCode != http.StatusTooManyRequests || json.Unmarshal(b, &e) != nil || !strings.Contains(e["error"].(string), "waiting") {
		t.Fatalf("chat-stream beyond the queue bound: %d %s", resp.StatusCode, b)
	}
	if code, out := h.Call(t, "POST", base+"/messages", "sebastian", map[string]any{"message": "more"}); code != http.StatusTooManyRequests {
		t.Fatalf("message beyond the queue bound: %d %v", code, out)
	}

	code, list := h.Call(t, "GET", base+"/queue", "sebastian", nil)
	entries, _ := list["queue"].([]any)
	if code != 200 || len(entries) != queueBound {
		t.Fatalf("queue: %d %v", code, list)
	}
	firstEntry := entries[0].(map[string]any)
	if firstEntry["message"] != "[[say never]]" {
		t.Fatalf("queue order: %v", entries)
	}
	// Another person sees no such session.
	if code, _ := h.Call(t, "GET", base+"/queue", "petra", nil); code != http.StatusNotFound {
		t.Fatalf("petra reading the queue: %d", code)
	}
	// Cancel the seed client's message and one more: the waiting stream
	// ends with its one error, the events stream shows both.
	for _, qid := range []string{firstEntry["id"].(string), ids[2]} {
		if code, out := h.Call(t, "DELETE", base+"/queue/"+qid, "sebastian", nil); code != 200 || out["cancelled"] != true {
			t.Fatalf("cancel %s: %d %v", qid, code, out)
		}
	}
	if code, _ := h.Call(t, "DELETE", base+"/queue/"+ids[2], "sebastian", nil); code != http.StatusNotFound {
		t.Fatalf("cancelling twice: %d", code)
	}
	evs := waiting.Rest(t)
	httpapitest.CheckCompat(t, evs)
	if len(evs) != 2 || httpapitest.Str(evs[0], "type") != "status" || !strings.Contains(httpapitest.Str(evs[1], "message"), "cancelled") {
		t.Fatalf("cancelled message's stream: %v", evs)
	}
	if _, list := h.Call(t, "GET", base+"/queue", "sebastian", nil); len(list["queue"].([]any)) != queueBound-2 {
		t.Fatalf("queue after cancelling two: %v", list)
	}

	// The running turn ends; the rest run in order.
	if code, out := h.Call(t, "POST", base+"/interrupt", "sebastian", nil); code != 200 {
		t.Fatalf("interrupt: %d %v", code, out)
	}
	var seen []string
	for len(seen) < queueBound-2 {
		for _, e := range httpapitest.Until(t, ev, "turn_start") {
			if httpapitest.Str(e, "type") == "turn_start" {
				seen = append(seen, httpapitest.Str(e, "message"))
			}
		}
	}
	httpapitest.Until(t, ev, "done")
	var want []string
	for i := range queueBound - 1 {
		if i != 2 {
			want = append(want, "[[say q"+string(rune('a'+i))+"]]")
		}
	}
	if strings.Join(seen, "|") != strings.Join(want, "|") {
		t.Fatalf("turns ran:\n %v\nwant %v", seen, want)
	}
	if h.timesSent("[[say never]]") != 0 || h.timesSent("[[say qc]]") != 0 {
		t.Fatal("a cancelled message reached the model")
	}
}

// queueBound is the default bound of waiting messages per session.
const queueBound = 8

func TestCORS(t *testing.T) {
	t.Parallel()
	const allowed = "https://notes.example"
	h := newHarness(t, harnessOpts{cors: []string{allowed}})
	off := newHarness(t, harnessOpts{})
	do := func(t *testing.T, base, method, path, origin string, hdr map[string]string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, nil)
		req.Header.Set("Origin", origin)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	preflight := map[string]string{"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization,x-notes-person,content-type"}
	authed := map[string]string{"Authorization": "Bearer " + token, "X-Notes-Person": "sebastian"}

	t.Run("preflight from a configured origin", func(t *testing.T) {
		resp := do(t, h.url, "OPTIONS", "/api/claude/chat-stream", allowed, preflight)
		if resp.StatusCode/100 != 2 || resp.Header.Get("Access-Control-Allow-Origin") != allowed {
			t.Fatalf("preflight: %d %v", resp.StatusCode, resp.Header)
		}
		hdrs := strings.ToLower(resp.Header.Get("Access-Control-Allow-Headers"))
		for _, want := range []string{"authorization", "x-notes-person", "content-type"} {
			if !strings.Contains(hdrs, want) {
				t.Fatalf("allowed headers %q lack %s", hdrs, want)
			}
		}
		if !strings.Contains(resp.Header.Get("Access-Control-Allow-Methods"), "POST") || !strings.Contains(resp.Header.Get("Vary"), "Origin") {
			t.Fatalf("preflight headers: %v", resp.Header)
		}
	})
	t.Run("request from a configured origin", func(t *testing.T) {
		resp := do(t, h.url, "GET", "/api/claude/sessions", allowed, authed)
		if resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != allowed {
			t.Fatalf("request: %d %v", resp.StatusCode, resp.Header)
		}
	})
	for name, base := range map[string]string{"other origin": h.url, "not configured": off.url} {
		t.Run(name, func(t *testing.T) {
			for _, resp := range []*http.Response{
				do(t, base, "OPTIONS", "/api/claude/chat-stream", "https://evil.example", preflight),
				do(t, base, "GET", "/api/claude/sessions", "https://evil.example", authed),
				do(t, base, "OPTIONS", "/api/claude/chat-stream", allowed+".evil.example", preflight),
			} {
				for k := range resp.Header {
					if strings.HasPrefix(k, "Access-Control-") {
						t.Fatalf("CORS header %s for an origin not configured: %v", k, resp.Header)
					}
				}
			}
		})
	}
}

// scriptedReply answers a fake CLI's turns the way the scripted model
// answers the same messages: "[[say X]]" says X, "[[hang]]" never ends,
// anything else is echoed.
func scriptedReply(message string) (string, bool) {
	if message == "[[hang]]" {
		return "", false
	}
	if said, ok := strings.CutPrefix(message, "[[say "); ok {
		if said, ok := strings.CutSuffix(said, "]]"); ok {
			return said, true
		}
	}
	return "echo: " + message, true
}

// The compat endpoints encode a turn the same way for form and JSON
// requests, and for streaming and non-streaming clients.
func TestCompatEncodingsWithFakeCLI(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{reply: scriptedReply})

	status, evs := h.ChatStream(t, "sebastian", httpapitest.FormType, url.Values{"message": {"[[say from the phone]]"}}.Encode())
	if status != http.StatusOK {
		t.Fatalf("status %d", status)
	}
	httpapitest.CheckCompat(t, evs)
	if got := httpapitest.StreamText(evs); got != "from the phone" {
		t.Fatalf("text %q", got)
	}
	sid := httpapitest.Str(evs[len(evs)-1], "session_id")
	if sid == "" {
		t.Fatalf("done without session id: %v", evs)
	}

	status, evs = h.ChatStream(t, "sebastian", "application/json", httpapitest.JSONBody(map[string]any{"message": "[[say from the web]]", "session_id": sid}))
	if status != http.StatusOK {
		t.Fatalf("status %d", status)
	}
	httpapitest.CheckCompat(t, evs)
	if got := httpapitest.Str(evs[len(evs)-1], "session_id"); got != sid {
		t.Fatalf("session changed: %s -> %s", sid, got)
	}
	if got := httpapitest.StreamText(evs); got != "from the web" {
		t.Fatalf("text %q", got)
	}

	code, out := h.Call(t, "POST", "/api/claude/chat", "sebastian", map[string]any{"message": "[[say plain answer]]", "session_id": sid})
	if code != 200 || out["response"] != "plain answer" || out["session_id"] != sid || len(out["history"].([]any)) != 6 {
		t.Fatalf("chat: %d %v", code, out)
	}
	if got := h.fakes.CLI(sid).Sent(); len(got) != 3 {
		t.Fatalf("the CLI got %d messages, want 3: %q", len(got), got)
	}
}

// A chat-stream that has to wait (here behind a running turn) gets its
// NDJSON headers and a status line at once, before any event of its turn:
// a proxy with an idle limit must not cut it.
func TestChatStreamHeadersWhileWaiting(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{reply: scriptedReply})
	id := h.NewSession(t)
	if code, out := h.Call(t, "POST", "/api/claude/sessions/"+id+"/messages", "sebastian", map[string]any{"message": "[[hang]]"}); code != http.StatusAccepted {
		t.Fatalf("first message: %d %v", code, out)
	}
	s := h.OpenStream(t, httpapitest.FormType, httpapitest.Form("[[say after the wait]]", id))
	for name, want := range map[string]string{"Content-Type": "application/x-ndjson", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"} {
		if got := s.Header().Get(name); got != want {
			t.Fatalf("%s = %q, want %q", name, got, want)
		}
	}
	first, ok := s.Next(t)
	if !ok || httpapitest.Str(first, "type") != "status" || !strings.HasPrefix(httpapitest.Str(first, "message"), "Waiting for the reply to your previous message") {
		t.Fatalf("first line while waiting: %v", first)
	}
	if code, out := h.Call(t, "POST", "/api/claude/sessions/"+id+"/interrupt", "sebastian", nil); code != 200 {
		t.Fatalf("interrupt: %d %v", code, out)
	}
	evs := s.Rest(t)
	httpapitest.CheckCompat(t, evs)
	if got := httpapitest.StreamText(evs); got != "after the wait" {
		t.Fatalf("the waiting message: %v", evs)
	}
}
