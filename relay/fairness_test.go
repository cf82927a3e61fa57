package relay_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/httpapi/httpapitest"
	"github.com/majorhq/major/supervisor"
)

// TestOnePersonCannotStarveAnother: one person starts hanging turns in new
// chats until the server refuses one; the other person's first message
// still gets a process and an answer.
func TestOnePersonCannotStarveAnother(t *testing.T) {
	t.Parallel()
	pool := supervisor.NewPool(supervisor.PoolConfig{Max: 2, MaxPerPerson: 1, SlotWait: 5 * time.Second, Logger: zerolog.Nop()})
	defer pool.Close()
	h := newHarness(t, harnessOpts{pool: pool})
	held := 0
	for range 4 {
		id := h.NewSession(t)
		code, out := h.Call(t, "POST", "/api/claude/sessions/"+id+"/messages", "sebastian", map[string]any{"message": "[[hang]]"})
		if code == http.StatusAccepted {
			held++
			continue
		}
		if msg, _ := out["error"].(string); code != http.StatusServiceUnavailable || !strings.Contains(msg, "your other chats are busy") {
			t.Fatalf("the person over their share got %d %v", code, out)
		}
		break
	}
	if held == 0 {
		t.Fatal("no hanging turn started")
	}

	code, evs := h.ChatStream(t, "petra", "", httpapitest.JSONBody(map[string]any{"message": "[[say petra is served]]"}))
	if code != http.StatusOK || httpapitest.StreamText(evs) != "petra is served" || httpapitest.Str(evs[len(evs)-1], "type") != "done" {
		t.Fatalf("the other person, while %d hanging turns run: %d %v", held, code, evs)
	}
}

// TestWaitingTurnGetsSlotWhenOtherTurnEnds: with one process slot, a
// message to a second session waits while the first session's turn runs
// and gets the slot once that turn ends, long before the slot wait (a
// minute) runs out.
func TestWaitingTurnGetsSlotWhenOtherTurnEnds(t *testing.T) {
	t.Parallel()
	for _, second := range []string{"sebastian", "petra"} {
		t.Run("then "+second, func(t *testing.T) {
			t.Parallel()
			pool := supervisor.NewPool(supervisor.PoolConfig{Max: 1, MaxPerPerson: 1, SlotWait: time.Minute, Logger: zerolog.Nop()})
			defer pool.Close()
			h := newHarness(t, harnessOpts{pool: pool})
			first := h.NewSession(t)
			if code, out := h.Call(t, "POST", "/api/claude/sessions/"+first+"/messages", "sebastian", map[string]any{"message": "[[slow 20 100]]"}); code != http.StatusAccepted {
				t.Fatalf("first turn: %d %v", code, out)
			}
			code, evs := h.ChatStream(t, second, "", httpapitest.JSONBody(map[string]any{"message": "[[say got the slot]]"}))
			if code != http.StatusOK || httpapitest.StreamText(evs) != "got the slot" || httpapitest.Str(evs[len(evs)-1], "type") != "done" {
				t.Fatalf("waiting turn: %d %v", code, evs)
			}
		})
	}
}

// TestSessionsPerPersonCap: a person keeps at most MaxPerPerson sessions; a
// new one beyond, whether asked for or implied by a chat without a known
// session, gets 429 and creates nothing. Other persons are not affected,
// and clearing a session makes room.
func TestSessionsPerPersonCap(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{maxSessions: 3, stateDir: t.TempDir()})
	var ids []string
	for range 3 {
		ids = append(ids, h.NewSession(t))
	}
	code, out := h.Call(t, "POST", "/api/claude/sessions", "sebastian", nil)
	if msg, _ := out["error"].(string); code != http.StatusTooManyRequests || !strings.Contains(msg, "clear old ones") {
		t.Fatalf("a session beyond the cap: %d %v", code, out)
	}
	for _, path := range []string{"/api/claude/chat-stream", "/api/claude/chat"} {
		code, out := h.Call(t, "POST", path, "sebastian", map[string]any{"message": "hi", "session_id": "not-a-session"})
		if code != http.StatusTooManyRequests {
			t.Fatalf("%s creating a session beyond the cap: %d %v", path, code, out)
		}
	}
	if n := len(h.sessions.List("sebastian")); n != 3 {
		t.Fatalf("%d sessions after refusals, want 3", n)
	}
	if code, out := h.Call(t, "POST", "/api/claude/sessions", "petra", nil); code != http.StatusCreated {
		t.Fatalf("another person: %d %v", code, out)
	}
	if code, out := h.Call(t, "POST", "/api/claude/clear", "sebastian", map[string]any{"session_id": ids[0]}); code != http.StatusOK {
		t.Fatalf("clear: %d %v", code, out)
	}
	if code, out := h.Call(t, "POST", "/api/claude/sessions", "sebastian", nil); code != http.StatusCreated {
		t.Fatalf("after clearing one: %d %v", code, out)
	}
}

func TestChatStreamHeadersBeforeFirstEvent(t *testing.T) {
	t.Parallel()
	pool := supervisor.NewPool(supervisor.PoolConfig{Max: 1, SlotWait: 2 * time.Minute})
	t.Cleanup(pool.Close)
	h := newHarness(t, harnessOpts{pool: pool})
	// One session holds the only process slot with a turn that does not end.
	busy := h.NewSession(t)
	a, closeA := h.Attach(t, busy, "types=text,turn_start,done")
	defer closeA()
	if code, out := h.Call(t, "POST", "/api/claude/sessions/"+busy+"/messages", "sebastian", map[string]any{"message": "[[hang]]"}); code != http.StatusAccepted {
		t.Fatalf("busy message: %d %v", code, out)
	}
	httpapitest.Until(t, a, "turn_start")

	// A new conversation from the phone: the headers and a status come at
	// once while it waits for the slot.
	got := make(chan *http.Response, 1)
	go func() {
		req, _ := http.NewRequest("POST", h.url+"/api/claude/chat-stream", strings.NewReader(httpapitest.Form("[[say after the wait]]", "")))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("X-Notes-Person", "sebastian")
		req.Header.Set("Accept", "application/x-ndjson")
		req.Header.Set("Content-Type", httpapitest.FormType)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			close(got)
			return
		}
		got <- resp
	}()
	var resp *http.Response
	select {
	case resp = <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("no response headers while the message waits for a slot")
	}
	if resp == nil || resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("response while waiting for a slot: %v", resp)
	}
	t.Cleanup(func() { resp.Body.Close() })
	s := httpapitest.ReadStream(resp)
	first, ok := s.Next(t)
	if !ok || httpapitest.Str(first, "type") != "status" || !strings.HasPrefix(httpapitest.Str(first, "message"), "Waiting for a free assistant process") {
		t.Fatalf("first line while waiting: %v", first)
	}
	// The slot frees when the other turn ends; the message then runs.
	if code, out := h.Call(t, "POST", "/api/claude/sessions/"+busy+"/interrupt", "sebastian", nil); code != 200 {
		t.Fatalf("interrupt: %d %v", code, out)
	}
	evs := s.Rest(t)
	httpapitest.CheckCompat(t, evs)
	if httpapitest.StreamText(evs) != "after the wait" {
		t.Fatalf("the waiting message: %v", evs)
	}
}
