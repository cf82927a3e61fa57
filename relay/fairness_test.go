package relay_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

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
		id := h.newSession(t)
		code, out := h.call(t, "POST", "/api/claude/sessions/"+id+"/messages", "sebastian", map[string]any{"message": "[[hang]]"})
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

	code, evs := h.chatStream(t, "petra", "", jsonBody(map[string]any{"message": "[[say petra is served]]"}))
	if code != http.StatusOK || streamText(evs) != "petra is served" || str(evs[len(evs)-1], "type") != "done" {
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
			first := h.newSession(t)
			if code, out := h.call(t, "POST", "/api/claude/sessions/"+first+"/messages", "sebastian", map[string]any{"message": "[[slow 20 100]]"}); code != http.StatusAccepted {
				t.Fatalf("first turn: %d %v", code, out)
			}
			code, evs := h.chatStream(t, second, "", jsonBody(map[string]any{"message": "[[say got the slot]]"}))
			if code != http.StatusOK || streamText(evs) != "got the slot" || str(evs[len(evs)-1], "type") != "done" {
				t.Fatalf("waiting turn: %d %v", code, evs)
			}
		})
	}
}
