package main

import (
	"context"
	"sync"
	"time"
)

// shutdown is the server's schedule for stopping, within --shutdown-grace
// from the moment it begins (SIGTERM), so that every client gets the
// terminal event of its turn and nothing of the server runs past it:
//   - hooks ends at half of it: the work at a turn's or a terminal's end
//     (a commit, a pull, a push) stops there, so a remote that does not
//     answer holds no turn's end past it;
//   - turns ends at three quarters: running turns are interrupted, and
//     their terminal events (which wait for their hooks) are awaited
//     until then;
//   - end ends with the grace: streams are closed and HTTP drains by
//     then, and whatever process still runs is killed.
//
// Before it begins its contexts do not end.
type shutdown struct {
	grace             time.Duration
	hooks, turns, end context.Context
	cancels           []context.CancelFunc

	mu     sync.Mutex
	timers []*time.Timer
	begun  bool
}

func newShutdown(grace time.Duration) *shutdown {
	s := &shutdown{grace: grace}
	for _, c := range []*context.Context{&s.hooks, &s.turns, &s.end} {
		var cancel context.CancelFunc
		*c, cancel = context.WithCancel(context.Background())
		s.cancels = append(s.cancels, cancel)
	}
	return s
}

// begin starts the clock; later calls do nothing.
func (s *shutdown) begin() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.begun {
		return
	}
	s.begun = true
	for i, at := range []time.Duration{s.grace / 2, s.grace * 3 / 4, s.grace} {
		s.timers = append(s.timers, time.AfterFunc(at, s.cancels[i]))
	}
}

// bound is ctx, ended by the hooks' deadline too: a hook at a turn's or a
// terminal's end runs with it.
func (s *shutdown) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.hooks, cancel)
	return ctx, func() {
		stop()
		cancel()
	}
}

// onEnd runs f once the shutdown's time is up, unless stop is called
// first; stop waits for an f already running.
func (s *shutdown) onEnd(f func()) (stop func()) {
	stopped, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-s.end.Done():
			f()
		case <-stopped:
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(stopped) })
		<-done
	}
}

// close stops the clock and ends every context.
func (s *shutdown) close() {
	s.mu.Lock()
	for _, t := range s.timers {
		t.Stop()
	}
	s.mu.Unlock()
	for _, cancel := range s.cancels {
		cancel()
	}
}
