package supervisor_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/majorhq/major/clitest"
	"github.com/majorhq/major/scriptedmodel"
	"github.com/majorhq/major/supervisor"
)

// served is how a session's CLI runs in the server: in its sandbox,
// reaching the model through the gateway with a token of its own.
func served(tb testing.TB, env *clitest.Env) supervisor.Spec {
	tb.Helper()
	spec := testSpec(env)
	spec.Sandbox = env.Sandbox(tb, "sebastian")
	spec.Env, spec.Credential = env.Gateway(tb)
	return spec
}

// turnLog is a Sink that keeps a session's events (in rec) and, at each
// turn's end, how many requests the model had had by then.
type turnLog struct {
	rec   *clitest.Recorder
	model *scriptedmodel.Server

	mu    sync.Mutex
	marks []int
}

func (l *turnLog) Publish(ev supervisor.Event) {
	if ev.Kind == supervisor.EventTurnEnd {
		n := len(l.model.Requests())
		l.mu.Lock()
		l.marks = append(l.marks, n)
		l.mu.Unlock()
	}
	l.rec.Publish(ev)
}

// mark is how many requests the model had had when the n-th turn (from
// 1) ended.
func (l *turnLog) mark(n int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.marks[n-1]
}

// asked lists the indexes of the model's requests that ask it to answer
// message (its last user text).
func asked(model *scriptedmodel.Server, message string) []int {
	var out []int
	for i, r := range model.Requests() {
		if r.LastUserText() == message {
			out = append(out, i)
		}
	}
	return out
}

// checkTurns fails the test unless rec's turns start once and end once:
// starts and ends alternate, each end names the start before it, and
// there are n of each.
func checkTurns(tb testing.TB, rec *clitest.Recorder, n int) {
	tb.Helper()
	open, starts := 0, 0
	for _, ev := range rec.Events() {
		switch ev.Kind {
		case supervisor.EventTurnStart:
			if open != 0 {
				tb.Errorf("turn %d started while turn %d was open", ev.Turn, open)
			}
			open = ev.Turn
			starts++
		case supervisor.EventTurnEnd:
			if open == 0 || ev.Turn != open {
				tb.Errorf("turn %d ended, the open one was %d", ev.Turn, open)
			}
			open = 0
		}
	}
	if starts != n || open != 0 {
		tb.Errorf("%d turns started (want %d), turn %d still open", starts, n, open)
	}
}

// killAt is an OnSendStep that, once armed, kills the turn's process at
// step and waits until the CLI has seen it gone.
func killAt(tb testing.TB, at supervisor.SendStep, armed *atomic.Bool, cli func() *supervisor.CLI) func(supervisor.SendStep, *supervisor.Process) {
	return func(step supervisor.SendStep, p *supervisor.Process) {
		if step != at || p == nil || !armed.CompareAndSwap(true, false) {
			return
		}
		p.Kill()
		<-p.Done()
		deadline := time.Now().Add(30 * time.Second)
		for cli().Pid() == p.Pid() {
			if time.Now().After(deadline) {
				tb.Errorf("the CLI did not see its process %d exit", p.Pid())
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// TestTurnStartsOnceAndEndsOnce kills the CLI at each step of Send: before
// the turn's start is published (a process of the session's, and one
// taken from the warm pool), between the start and the write of the
// message (before and after the turn has its process in hand), and right
// after the write. Whatever dies when, every turn
// starts once and ends once (and an end never comes before its start);
// a turn whose process died before it started runs on a new one; a turn
// reported failed never has its message reach the model afterwards; and
// the session runs the next message and can be interrupted.
func TestTurnStartsOnceAndEndsOnce(t *testing.T) {
	t.Parallel()
	cases := []struct {
		step supervisor.SendStep
		warm bool
		// runs: the killed turn runs on a new process; otherwise it ends
		// crashed.
		runs bool
		// never: its message never reaches the model at all.
		never bool
	}{
		{step: supervisor.StepBeforeStart, runs: true},
		{step: supervisor.StepBeforeStart, warm: true, runs: true},
		{step: supervisor.StepAfterStart, never: true},
		{step: supervisor.StepBeforeWrite, never: true},
		{step: supervisor.StepAfterWrite},
	}
	for _, tc := range cases {
		name := tc.step.String()
		if tc.warm {
			name += " (warm)"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			env := clitest.New(t, nil)
			spec := served(t, env)
			var pool *supervisor.Pool
			if tc.warm {
				w := newWarmPool(t, env, supervisor.PoolConfig{Max: 3}, 1)
				w.mu.Lock()
				w.spec = spec
				w.mu.Unlock()
				pool = w.Pool
				pool.Touch("sebastian")
				waitWarm(t, w, "sebastian", 1)
			}
			log := &turnLog{rec: clitest.NewRecorder(), model: env.Model}
			var armed atomic.Bool
			var cli *supervisor.CLI
			cli = newSession(t, env, log.rec, func(c *supervisor.CLIConfig) {
				c.Spec, c.Sink, c.Pool = spec, log, pool
				c.OnSendStep = killAt(t, tc.step, &armed, func() *supervisor.CLI { return cli })
			})
			killed := 1
			if !tc.warm {
				// The killed turn is the second: the first started the
				// session's process.
				if got := log.rec.Turn(t, cli, "[[say one]]"); got != "one" {
					t.Fatalf("first turn: %q", got)
				}
				killed = 2
			}
			// Killed right after the write, a quick answer could still
			// beat the kill on a loaded machine and end the turn well: this
			// one takes seconds to finish.
			two := "[[say two]]"
			if tc.step == supervisor.StepAfterWrite {
				two = "[[slow 40 100]]"
			}
			armed.Store(true)
			send(t, cli, two)
			end := log.rec.WaitEnd(t, 90*time.Second)
			if armed.Load() {
				t.Fatal("the process was never killed")
			}
			switch {
			case tc.runs:
				if end.Err != nil || log.rec.Text() != "two" {
					t.Fatalf("the killed turn ended with %v and %q, want it run on a new process", end.Err, log.rec.Text())
				}
				if n := len(asked(env.Model, two)); n != 1 {
					t.Fatalf("the model answered the message %d times", n)
				}
			case !errors.Is(end.Err, supervisor.ErrProcessExited):
				t.Fatalf("the killed turn ended with %v, want crashed", end.Err)
			}
			// Checked again once the next turn ran: a message sent on
			// after its turn failed reaches the model late.
			checkLate := func() {
				t.Helper()
				late := 0
				for _, i := range asked(env.Model, two) {
					if tc.never || i >= log.mark(killed) {
						late++
					}
				}
				if !tc.runs && late > 0 {
					t.Fatalf("the message reached the model %d times after its turn failed", late)
				}
			}
			checkLate()
			if got := log.rec.Turn(t, cli, "[[say three]]"); got != "three" {
				t.Fatalf("the next turn: %q", got)
			}
			checkLate()
			send(t, cli, "[[hang]]")
			waitFor(t, 60*time.Second, func() bool { return len(asked(env.Model, "[[hang]]")) == 1 })
			if err := cli.Interrupt(context.Background()); err != nil {
				t.Fatal(err)
			}
			if end := log.rec.WaitEnd(t, 60*time.Second); !end.Interrupted {
				t.Fatalf("interrupted turn ended with %+v", end)
			}
			checkTurns(t, log.rec, killed+2)
			if pool != nil {
				if n := pool.Stats().Live - pool.Stats().Warm; n != 1 {
					t.Fatalf("the pool counts %d processes of sessions, want 1", n)
				}
			}
		})
	}
}

// TestInterruptWhileWaitingForASlot: with one process slot, held by
// another session's turn, a turn waiting for the slot is interrupted: it
// starts and ends interrupted at once, starts no process, evicts nothing
// and never reaches the model; the other turn runs on; and the session
// runs its next message once the slot is free.
func TestInterruptWhileWaitingForASlot(t *testing.T) {
	t.Parallel()
	env := clitest.New(t, nil)
	spec := served(t, env)
	pool := supervisor.NewPool(supervisor.PoolConfig{Max: 1, SlotWait: 5 * time.Minute})
	t.Cleanup(pool.Close)
	session := func(name string, rec *clitest.Recorder) *supervisor.CLI {
		return newSession(t, env, rec, func(c *supervisor.CLIConfig) {
			c.ID += "-" + name
			c.Spec, c.Pool = spec, pool
		})
	}
	holderRec, waiterRec := clitest.NewRecorder(), clitest.NewRecorder()
	holder, waiter := session("holder", holderRec), session("waiter", waiterRec)

	send(t, holder, "[[hang]]")
	waitFor(t, 60*time.Second, func() bool { return len(asked(env.Model, "[[hang]]")) == 1 })
	sent := make(chan error, 1)
	go func() { sent <- waiter.Send(context.Background(), "[[say waited]]") }()
	waitFor(t, 30*time.Second, func() bool {
		return waiterRec.Count(func(ev supervisor.Event) bool { return ev.Kind == supervisor.EventSlotWait }) == 1
	})
	if err := waiter.Interrupt(context.Background()); err != nil {
		t.Fatalf("interrupt while waiting for a slot: %v", err)
	}
	// Bounded by the holder's turn, which never ends by itself.
	if end := waiterRec.WaitEnd(t, 60*time.Second); !end.Interrupted || end.Err != nil {
		t.Fatalf("the waiting turn ended with %+v", end)
	}
	if err := <-sent; err != nil {
		t.Fatalf("send of the interrupted turn: %v", err)
	}
	if holder.State() != supervisor.StateRunning || waiter.Pid() != 0 || pool.Live() != 1 {
		t.Fatalf("after the interrupt: holder %s, waiter's pid %d, %d processes", holder.State(), waiter.Pid(), pool.Live())
	}
	if n := len(asked(env.Model, "[[say waited]]")); n != 0 {
		t.Fatalf("the interrupted message reached the model %d times", n)
	}

	if err := holder.Interrupt(context.Background()); err != nil {
		t.Fatal(err)
	}
	holderRec.WaitEnd(t, 60*time.Second)
	if got := waiterRec.Turn(t, waiter, "[[say next]]"); got != "next" {
		t.Fatalf("the next turn: %q", got)
	}
	checkTurns(t, waiterRec, 2)
	checkTurns(t, holderRec, 1)
	if pool.Live() != 1 || holder.Pid() != 0 {
		t.Fatalf("%d processes, the holder's pid %d: want the waiter's alone", pool.Live(), holder.Pid())
	}
}
