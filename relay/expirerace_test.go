package relay_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/relay"
	"github.com/majorhq/major/relay/relaytest"
	"github.com/majorhq/major/supervisor"
)

// Expiry keeps the sessions in use: one idle for longer than the TTL
// that a person has just come back to, whose message waits for a process
// slot, is in use. Expiry looks only at an open turn and a terminal, so it clears such a session under its waiting
// message (which fails, "the session was closed") and deletes its
// history from disk.
func TestExpireKeepsASessionWhoseMessageWaits(t *testing.T) {
	t.Parallel()
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	pool := supervisor.NewPool(supervisor.PoolConfig{Max: 1, SlotWait: 5 * time.Minute, Logger: zerolog.Nop()})
	t.Cleanup(pool.Close)
	sessions, fakes := relaytest.NewRegistry(t, relay.RegistryConfig{TTL: time.Hour,
		Now: func() time.Time { return time.Unix(0, now.Load()) }})
	fakes.Pool = pool
	old, err := sessions.GetOrCreate("", "sebastian")
	if err != nil {
		t.Fatal(err)
	}
	now.Add(int64(2 * time.Hour)) // the old chat has been idle for two hours
	busy, _ := sessions.GetOrCreate("", "petra")
	if tk, err := sessions.Submit(busy, "hold the slot", relay.SubmitOptions{}); err != nil || started(t, tk) != nil {
		t.Fatalf("the other chat's turn: %v", err)
	}
	back, err := sessions.Submit(old, "I am back", relay.SubmitOptions{Stream: true})
	if err != nil {
		t.Fatal(err)
	}
	<-back.SlotWait() // the person's message waits for the one slot

	if n := sessions.Expire(); n != 0 {
		t.Errorf("expiry cleared %d sessions while a message waited in one", n)
	}
	if _, err := sessions.Get(old.ID, "sebastian"); err != nil {
		t.Errorf("the session whose message waits is gone: %v", err)
	}
	fakes.CLI(busy.ID).Reply("done")
	if err := started(t, back); err != nil {
		t.Fatalf("the waiting message failed: %v", err)
	}
}
