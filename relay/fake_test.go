package relay_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/majorhq/major/relay"
	"github.com/majorhq/major/relay/relaytest"
	"github.com/majorhq/major/supervisor"
)

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
	h := newHarness(t, harnessOpts{fake: true, fakeReply: scriptedReply})

	status, evs := h.chatStream(t, "sebastian", formType, url.Values{"message": {"[[say from the phone]]"}}.Encode())
	if status != http.StatusOK {
		t.Fatalf("status %d", status)
	}
	checkCompat(t, evs)
	if got := streamText(evs); got != "from the phone" {
		t.Fatalf("text %q", got)
	}
	sid := str(evs[len(evs)-1], "session_id")
	if sid == "" {
		t.Fatalf("done without session id: %v", evs)
	}

	status, evs = h.chatStream(t, "sebastian", "application/json", jsonBody(map[string]any{"message": "[[say from the web]]", "session_id": sid}))
	if status != http.StatusOK {
		t.Fatalf("status %d", status)
	}
	checkCompat(t, evs)
	if got := str(evs[len(evs)-1], "session_id"); got != sid {
		t.Fatalf("session changed: %s -> %s", sid, got)
	}
	if got := streamText(evs); got != "from the web" {
		t.Fatalf("text %q", got)
	}

	code, out := h.call(t, "POST", "/api/claude/chat", "sebastian", map[string]any{"message": "[[say plain answer]]", "session_id": sid})
	if code != 200 || out["response"] != "plain answer" || out["session_id"] != sid || len(out["history"].([]any)) != 6 {
		t.Fatalf("chat: %d %v", code, out)
	}
	if got := h.fakes.CLI(sid).Sent(); len(got) != 3 {
		t.Fatalf("the CLI got %d messages, want 3: %q", len(got), got)
	}
}

// A chat reports its CLI's state, and clearing it closes the CLI.
func TestChatStateAndClearWithFakeCLI(t *testing.T) {
	t.Parallel()
	sessions, fakes := relaytest.NewSessions(t, relay.SessionsConfig{})
	chat, err := sessions.GetOrCreate("", "sebastian")
	if err != nil {
		t.Fatal(err)
	}
	fake := fakes.CLI(chat.ID)
	if got := chat.Info().State; got != string(supervisor.StateIdle) {
		t.Fatalf("state before a turn: %s", got)
	}
	if err := sessions.Send(context.Background(), chat, "hello"); err != nil {
		t.Fatal(err)
	}
	if got := chat.Info().State; got != string(supervisor.StateRunning) {
		t.Fatalf("state during a turn: %s", got)
	}
	if !fake.Reply("hi there") {
		t.Fatal("no turn was running")
	}
	hist := chat.History()
	if len(hist) != 2 || hist[0].Content != "hello" || hist[1].Content != "hi there" {
		t.Fatalf("history %v", hist)
	}
	closed := false
	fake.CloseFunc = func() error { closed = true; return nil }
	if !sessions.Clear(chat.ID, "sebastian") || !closed {
		t.Fatalf("clear: closed=%v", closed)
	}
}
