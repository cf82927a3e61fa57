package main

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// The shutdown's schedule: nothing ends before it begins; once begun, a
// hook's context ends with the hooks' deadline even though its own
// context does not, every stage ends, and what runs at the end runs once
// (and not at all when stopped before).
func TestShutdownSchedule(t *testing.T) {
	t.Parallel()
	down := newShutdown(200 * time.Millisecond)
	defer down.close()
	var killed, stoppedEarly atomic.Int32
	stopKill := down.onEnd(func() { killed.Add(1) })
	down.onEnd(func() { stoppedEarly.Add(1) })()

	hook, cancel := down.bound(context.Background())
	defer cancel()
	for _, c := range []context.Context{down.hooks, down.turns, down.end, hook} {
		if c.Err() != nil {
			t.Fatal("a context ended before the shutdown began")
		}
	}
	down.begin()
	down.begin() // a second SIGTERM changes nothing
	for _, c := range []context.Context{hook, down.hooks, down.turns, down.end} {
		select {
		case <-c.Done():
		case <-time.After(30 * time.Second):
			t.Fatal("a stage of the shutdown never ended")
		}
	}
	// What runs at the end runs on its own goroutine: give it time.
	for deadline := time.Now().Add(30 * time.Second); killed.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	stopKill()
	if killed.Load() != 1 || stoppedEarly.Load() != 0 {
		t.Fatalf("at the end: ran %d times, the stopped one %d times", killed.Load(), stoppedEarly.Load())
	}
}
