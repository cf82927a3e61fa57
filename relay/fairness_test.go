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
	pool := supervisor.NewPool(supervisor.PoolConfig{Max: 2, MaxPerPerson: 1, SlotWait: 200 * time.Millisecond, Logger: zerolog.Nop()})
	defer pool.Close()
	h := newFakeHarness(t, harnessOpts{pool: pool})
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
// and gets the slot once that turn ends (or is interrupted), long before
// the slot wait (a minute) runs out. A chat-stream that waits so gets its
// NDJSON headers and a status line at once, before the first event of its
// turn.
func TestWaitingTurnGetsSlotWhenOtherTurnEnds(t *testing.T) {
	t.Parallel()
	for _, second := range []string{"sebastian", "petra"} {
		t.Run("then "+second, func(t *testing.T) {
			t.Parallel()
			pool := supervisor.NewPool(supervisor.PoolConfig{Max: 1, MaxPerPerson: 1, SlotWait: time.Minute, Logger: zerolog.Nop()})
			defer pool.Close()
			h := newFakeHarness(t, harnessOpts{pool: pool})
			first := h.NewSession(t)
			if code, out := h.Call(t, "POST", "/api/claude/sessions/"+first+"/messages", "sebastian", map[string]any{"message": "[[hang]]"}); code != http.StatusAccepted {
				t.Fatalf("first turn: %d %v", code, out)
			}
			s := openStreamAs(t, h, second, httpapitest.Form("[[say got the slot]]", ""))
			first1, ok := s.Next(t)
			if !ok || httpapitest.Str(first1, "type") != "status" || !strings.HasPrefix(httpapitest.Str(first1, "message"), "Waiting for a free assistant process") {
				t.Fatalf("first line while waiting: %v", first1)
			}
			// The slot frees when the other turn ends: for petra it ends
			// normally, for sebastian it is interrupted.
			if second == "petra" {
				h.fake(t, first).Reply("first done")
			} else if code, out := h.Call(t, "POST", "/api/claude/sessions/"+first+"/interrupt", "sebastian", nil); code != 200 {
				t.Fatalf("interrupt: %d %v", code, out)
			}
			evs := s.Rest(t)
			httpapitest.CheckCompat(t, evs)
			if httpapitest.StreamText(evs) != "got the slot" || httpapitest.Str(evs[len(evs)-1], "type") != "done" {
				t.Fatalf("waiting turn: %v", evs)
			}
		})
	}
}

// openStreamAs posts a form-encoded chat-stream request as person and
// returns once the response headers are in, which must be soon: they
// come before the turn, even one that waits.
func openStreamAs(tb testing.TB, h *harness, person, form string) *httpapitest.LiveStream {
	tb.Helper()
	got := make(chan *http.Response, 1)
	go func() {
		req, _ := http.NewRequest("POST", h.url+"/api/claude/chat-stream", strings.NewReader(form))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("X-Notes-Person", person)
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
		tb.Fatal("no response headers while the message waits")
	}
	if resp == nil || resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		tb.Fatalf("response while waiting: %v", resp)
	}
	tb.Cleanup(func() { resp.Body.Close() })
	return httpapitest.ReadStream(resp)
}

// TestSessionsPerPersonCap: a person keeps at most MaxPerPerson sessions; a
// new one beyond, whether asked for or implied by a chat without a known
// session, gets 429 and creates nothing. Other persons are not affected,
// and clearing a session makes room.
func TestSessionsPerPersonCap(t *testing.T) {
	t.Parallel()
	h := newFakeHarness(t, harnessOpts{maxSessions: 3, stateDir: t.TempDir()})
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
