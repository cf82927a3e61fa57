package relay_test

import (
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/httpapi/httpapitest"
	"github.com/majorhq/major/supervisor"
)

// slotHeld is a harness on a pool of one process slot (--max-processes
// 1), held by the hanging turn of the chat holder, and another chat,
// waiter.
func slotHeld(tb testing.TB) (h *harness, pool *supervisor.Pool, holder, waiter string) {
	tb.Helper()
	pool = supervisor.NewPool(supervisor.PoolConfig{Max: 1, SlotWait: 5 * time.Minute, Logger: zerolog.Nop()})
	tb.Cleanup(pool.Close)
	h = newHarness(tb, harnessOpts{pool: pool})
	holder, waiter = h.NewSession(tb), h.NewSession(tb)
	if code, out := h.Call(tb, "POST", "/api/claude/sessions/"+holder+"/messages", "sebastian", map[string]any{"message": "[[hang]]"}); code != 202 {
		tb.Fatalf("the holder's message: %d %v", code, out)
	}
	return h, pool, holder, waiter
}

// With one process slot (--max-processes 1), held by another chat's turn,
// a chat-stream whose message waits for the slot is interrupted: its
// client reads the wait, then its turn's start and end (interrupted) at
// once, while the other turn still runs; no CLI starts for it, and its
// message never reaches the model. Once the slot is free the chat runs its
// next message.
func TestInterruptWhileWaitingForASlotThroughTheAPI(t *testing.T) {
	t.Parallel()
	h, pool, holder, waiter := slotHeld(t)

	s := h.OpenStream(t, "", httpapitest.JSONBody(map[string]any{"message": "[[say waited]]", "session_id": waiter}))
	if ev := s.UpTo(t, "status"); httpapitest.Str(ev, "message") != "Waiting for a free assistant process ..." {
		t.Fatalf("the waiting stream said %v", ev)
	}
	if code, out := h.Call(t, "POST", "/api/claude/sessions/"+waiter+"/interrupt", "sebastian", nil); code != 200 {
		t.Fatalf("interrupt: %d %v", code, out)
	}
	evs := s.Rest(t)
	httpapitest.CheckCompat(t, evs)
	if last := evs[len(evs)-1]; httpapitest.Str(last, "type") != "done" {
		t.Fatalf("the interrupted stream ended with %v", last)
	}
	if st := stateOf(t, h, holder); st != "running" {
		t.Fatalf("the holder is %s; its turn should still run", st)
	}
	if pool.Live() != 1 {
		t.Fatalf("%d processes with one slot", pool.Live())
	}
	for _, r := range h.env.Model.Requests() {
		if r.LastUserText() == "[[say waited]]" {
			t.Fatal("the interrupted message reached the model")
		}
	}
	_, history := h.Call(t, "GET", "/api/claude/history?session_id="+waiter, "sebastian", nil)
	if msgs := history["messages"].([]any); len(msgs) != 2 || msgs[1].(map[string]any)["content"] != "[Interrupted]" {
		t.Fatalf("the waiter's history: %v", history)
	}

	if code, _ := h.Call(t, "POST", "/api/claude/sessions/"+holder+"/interrupt", "sebastian", nil); code != 200 {
		t.Fatalf("interrupt the holder: %d", code)
	}
	_, next := h.ChatStream(t, "sebastian", "", httpapitest.JSONBody(map[string]any{"message": "[[say next]]", "session_id": waiter}))
	if got := httpapitest.StreamText(next); got != "next" {
		t.Fatalf("the next message: %q", got)
	}
}
