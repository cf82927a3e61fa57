package supervisor

import (
	"context"
	"errors"
	"slices"
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

// A person's waiting process makes room in the least recently used idle
// session's slot: their own at their share, anyone's when the server is
// full; never in their most recently used session's, so with a share of
// one their chat keeps its process.
func TestWarmVictims(t *testing.T) {
	t.Parallel()
	p := NewPool(PoolConfig{})
	defer p.Close()
	now := time.Now()
	session := func(id, person string, ago time.Duration) *CLI {
		s := NewCLI(CLIConfig{ID: id, Person: person})
		s.lastActivity = now.Add(-ago)
		p.live[&Process{}] = s
		return s
	}
	ids := func(v []*CLI) []string {
		var out []string
		for _, s := range v {
			out = append(out, s.ID())
		}
		return out
	}
	session("petra-old", "petra", 3*time.Hour)
	session("seb-old", "sebastian", 2*time.Hour)
	session("seb-mid", "sebastian", time.Hour)
	session("seb-latest", "sebastian", time.Minute)
	cases := []struct {
		name   string
		person string
		capped bool
		want   []string
	}{
		{"at their share: their own, never the latest", "sebastian", true, []string{"seb-old", "seb-mid"}},
		{"server full: anyone's, never their latest", "sebastian", false, []string{"petra-old", "seb-old", "seb-mid"}},
		{"a share of one keeps its chat", "petra", true, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p.mu.Lock()
			got := ids(p.warmVictimsLocked(tc.person, tc.capped))
			p.mu.Unlock()
			if !slices.Equal(got, tc.want) {
				t.Fatalf("victims %v, want %v", got, tc.want)
			}
		})
	}
}
