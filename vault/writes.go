package vault

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrSyncRunning is returned by BeginWrite when a git sync held the write
// back for longer than the write may wait.
var ErrSyncRunning = errors.New("the vault is being synced with git")

// writeKey names one file-tool call: its session and the CLI's tool_use_id.
type writeKey struct{ session, toolUseID string }

// writeLeases makes file-tool writes and git syncs exclude each other: a
// write holds a lease from its PreToolUse to its PostToolUse, a sync waits
// for the open leases before it touches the work tree and holds new ones
// back until it is done. A pull's autostash resets the work tree for a
// while; a write in that window would be reset away or left in a stash.
type writeLeases struct {
	ttl time.Duration

	mu      sync.Mutex
	open    map[writeKey]time.Time // expiry
	syncing bool
	// changed is closed and replaced whenever a lease ends or a sync
	// ends, to wake the waiters.
	changed chan struct{}
}

func newWriteLeases(ttl time.Duration) *writeLeases {
	return &writeLeases{ttl: ttl, open: map[writeKey]time.Time{}, changed: make(chan struct{})}
}

// notify wakes every waiter. w.mu is held.
func (w *writeLeases) notify() {
	close(w.changed)
	w.changed = make(chan struct{})
}

// begin takes a lease for k, waiting up to hold while a sync runs.
func (w *writeLeases) begin(ctx context.Context, k writeKey, hold time.Duration) error {
	timer := time.NewTimer(hold)
	defer timer.Stop()
	for {
		w.mu.Lock()
		if !w.syncing {
			w.open[k] = time.Now().Add(w.ttl)
			w.mu.Unlock()
			return nil
		}
		changed := w.changed
		w.mu.Unlock()
		select {
		case <-changed:
		case <-timer.C:
			return ErrSyncRunning
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// end releases the lease of k, if any.
func (w *writeLeases) end(k writeKey) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.open[k]; ok {
		delete(w.open, k)
		w.notify()
	}
}

// endSession releases every lease of session.
func (w *writeLeases) endSession(session string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(w.open)
	for k := range w.open {
		if k.session == session {
			delete(w.open, k)
		}
	}
	if len(w.open) != n {
		w.notify()
	}
}

// quiesce marks a sync as running, so new writes wait, and waits up to
// wait (or ctx) for the open leases to end; expired leases do not count.
// It reports whether no write is open any more; release ends the sync
// either way and must be called.
func (w *writeLeases) quiesce(ctx context.Context, wait time.Duration) (quiet bool, release func()) {
	w.mu.Lock()
	w.syncing = true
	w.mu.Unlock()
	release = func() {
		w.mu.Lock()
		w.syncing = false
		w.notify()
		w.mu.Unlock()
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		w.mu.Lock()
		now := time.Now()
		next := time.Duration(-1)
		for k, exp := range w.open {
			if !now.Before(exp) {
				delete(w.open, k)
				continue
			}
			if left := exp.Sub(now); next < 0 || left < next {
				next = left
			}
		}
		changed := w.changed
		w.mu.Unlock()
		if next < 0 {
			return true, release
		}
		expiry := time.NewTimer(next)
		select {
		case <-changed:
		case <-expiry.C:
		case <-deadline.C:
			expiry.Stop()
			return false, release
		case <-ctx.Done():
			expiry.Stop()
			return false, release
		}
		expiry.Stop()
	}
}
