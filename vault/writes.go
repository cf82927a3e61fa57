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

// ErrTooManyWrites is returned by BeginWrite when the session's other
// writes held it back for longer than the write may wait.
var ErrTooManyWrites = errors.New("too many file tools of this session are open at once")

// maxWritesPerSession bounds the open leases of one session: the CLI runs
// at most 10 tools at once (CLAUDE_CODE_MAX_TOOL_USE_CONCURRENCY); a
// further one waits for a lease of its session to end. Whoever can take
// leases (a terminal's hook token is in its shell) holds this many at
// most, rather than one per tool_use_id they make up.
const maxWritesPerSession = 10

// writeKey names one file-tool call: its session and the CLI's tool_use_id.
type writeKey struct{ session, toolUseID string }

// writeLeases makes file-tool writes and git syncs exclude each other: a
// write holds a lease from its PreToolUse to its PostToolUse, a sync waits
// for the open leases before it touches the work tree and holds new ones
// back until it is done. A pull's autostash resets the work tree for a
// while; a write in that window would be reset away or left in a stash.
//
// A lease is honoured for ttl at most, shorter than a sync waits: the
// leases open when a sync starts cannot be renewed while it runs, so it
// always gets to pull, however leases are taken.
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

// begin takes (or renews) a lease for k, waiting up to hold while a sync
// runs or k's session holds maxWritesPerSession other leases.
func (w *writeLeases) begin(ctx context.Context, k writeKey, hold time.Duration) error {
	timer := time.NewTimer(hold)
	defer timer.Stop()
	for {
		w.mu.Lock()
		next, waitFor := time.Duration(-1), ErrSyncRunning
		if !w.syncing {
			if next, waitFor = w.room(k); waitFor == nil {
				w.open[k] = time.Now().Add(w.ttl)
				w.mu.Unlock()
				return nil
			}
		}
		changed := w.changed
		w.mu.Unlock()
		if over, err := wait(ctx, changed, next, timer.C); err != nil {
			return err
		} else if over {
			return waitFor
		}
	}
}

// wait waits for changed, for next (when not negative: a full session's
// first lease expires), for hold (over) or for ctx (its error).
func wait(ctx context.Context, changed <-chan struct{}, next time.Duration, hold <-chan time.Time) (over bool, err error) {
	var expiry <-chan time.Time
	if next >= 0 {
		t := time.NewTimer(next)
		defer t.Stop()
		expiry = t.C
	}
	select {
	case <-changed:
	case <-expiry:
	case <-hold:
		return true, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
	return false, nil
}

// room drops the expired leases of k's session and says whether k may be
// taken now: nil, or ErrTooManyWrites and when the session's first lease
// expires. w.mu is held.
func (w *writeLeases) room(k writeKey) (next time.Duration, err error) {
	if _, ok := w.open[k]; ok {
		return -1, nil // a renewal
	}
	now, n := time.Now(), 0
	next = -1
	for o, exp := range w.open {
		if o.session != k.session {
			continue
		}
		if !now.Before(exp) {
			delete(w.open, o)
			continue
		}
		n++
		if left := exp.Sub(now); next < 0 || left < next {
			next = left
		}
	}
	if n < maxWritesPerSession {
		return -1, nil
	}
	return next, ErrTooManyWrites
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
