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
