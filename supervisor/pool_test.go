package supervisor

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A slot held for a process the pool does not run (a terminal) counts
// against the limits like any other, until it is released.
func TestPoolHoldCountsAgainstTheLimits(t *testing.T) {
	t.Parallel()
	p := NewPool(PoolConfig{Max: 2, MaxPerPerson: 1, SlotWait: 50 * time.Millisecond})
	defer p.Close()
	ctx := context.Background()
	release, err := p.Hold(ctx, "sebastian")
	if err != nil {
		t.Fatal(err)
	}
	if p.Live() != 1 {
		t.Fatalf("live %d", p.Live())
	}
	if _, err := p.Hold(ctx, "sebastian"); !errors.Is(err, ErrPersonBusy) {
		t.Fatalf("a second slot for the same person: %v", err)
	}
	other, err := p.Hold(ctx, "petra")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Hold(ctx, "third"); !errors.Is(err, ErrNoSlot) {
		t.Fatalf("a slot beyond the limit: %v", err)
	}
	release()
	release()
	other()
	if p.Live() != 0 {
		t.Fatalf("live after release %d", p.Live())
	}
	if r, err := p.Hold(ctx, "sebastian"); err != nil {
		t.Fatalf("after release: %v", err)
	} else {
		r()
	}
}
