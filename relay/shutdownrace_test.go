package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/majorhq/major/relay"
)

// A shutdown refuses new turns: a message that waits for a process slot
// when the shutdown begins must not start its turn once the running turns
// it waited for are interrupted and free their slots. With one slot held
// by another chat's hanging turn, the shutdown interrupts that turn; the
// waiting message then takes the freed slot, a CLI starts for it and its
// message reaches the model, after the shutdown began.
func TestShutdownStartsNoTurnWaitingForASlot(t *testing.T) {
	t.Parallel()
	h, pool, _, waiter := slotHeld(t)
	chat, err := h.sessions.Get(waiter, "sebastian")
	if err != nil {
		t.Fatal(err)
	}
	const late = "[[say started during the shutdown]]"
	tk, err := h.sessions.Submit(chat, late, relay.SubmitOptions{Stream: true})
	if err != nil {
		t.Fatal(err)
	}
	<-tk.SlotWait() // the holder's turn has the one slot
	// Its process has started once its message reached the model.
	for !modelGot(h, "[[hang]]") {
		time.Sleep(5 * time.Millisecond)
	}
	starts := pool.Stats().Starts

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h.sessions.Shutdown(ctx) // interrupts the holder's turn, whose slot frees

	<-tk.Started()
	if tk.Err() == nil {
		// Its turn started: it may only have ended at once, interrupted,
		// without its message going anywhere. Follow it to its end.
		turn := tk.Turn()
		sub, err := chat.Stream().Subscribe(tk.StartSeq(), func(ev *relay.Event) bool { return ev.Turn == turn && ev.Terminal }, 16)
		if err != nil {
			t.Fatal(err)
		}
		if len(sub.Replay) == 0 {
			<-sub.C
		}
		sub.Close()
	}
	if modelGot(h, late) {
		t.Errorf("a message that waited for a slot reached the model after the shutdown began (its ticket: %v)", tk.Err())
	}
	if n := pool.Stats().Starts - starts; n != 0 {
		t.Errorf("%d CLI processes started after the shutdown began", n)
	}
}

// modelGot reports whether the scripted model got a request whose last
// user message is text.
func modelGot(h *harness, text string) bool {
	for _, r := range h.env.Model.Requests() {
		if r.LastUserText() == text {
			return true
		}
	}
	return false
}
