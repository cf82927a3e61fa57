package supervisor_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/clitest"
	"github.com/majorhq/major/internal/procgroup"
	"github.com/majorhq/major/supervisor"
)

// warmPool is a pool whose warm pool launches person's processes as
// newSession's sessions are launched; prompt[person], when set, overrides
// the system prompt the pool starts person's processes with.
type warmPool struct {
	*supervisor.Pool
	mu     sync.Mutex
	prompt map[string]string
	// spec, when set, is what the pool starts every process with.
	spec supervisor.Spec
}

func newWarmPool(tb testing.TB, env *clitest.Env, cfg supervisor.PoolConfig, perPerson int) *warmPool {
	tb.Helper()
	cfg.Logger = zerolog.New(zerolog.NewTestWriter(tb)).Level(zerolog.InfoLevel)
	w := &warmPool{Pool: supervisor.NewPool(cfg), prompt: map[string]string{}}
	w.Warm(supervisor.WarmConfig{PerPerson: perPerson, Launch: func(person string) supervisor.WarmLaunch {
		spec := testSpec(env)
		w.mu.Lock()
		if w.spec.Binary != "" {
			spec = w.spec
		}
		if p := w.prompt[person]; p != "" {
			spec.SystemPrompt = p
		}
		w.mu.Unlock()
		return supervisor.WarmLaunch{Dir: env.Vault(person), Spec: spec}
	}})
	tb.Cleanup(func() { w.close(tb) })
	return w
}

// close closes the pool and checks that nothing the warm pool started
// outlives it.
func (w *warmPool) close(tb testing.TB) {
	tb.Helper()
	var pids []int
	for _, p := range []string{"sebastian", "petra"} {
		pids = append(pids, w.WarmPids(p)...)
	}
	w.Close()
	for _, pid := range pids {
		assertGroupGone(tb, pid)
	}
	if n := w.Stats().Warm; n != 0 {
		tb.Errorf("%d waiting processes after Close", n)
	}
}

func testSpec(env *clitest.Env) supervisor.Spec {
	return supervisor.Spec{
		Binary:         env.Binary,
		Env:            env.ChildEnv(),
		SystemPrompt:   "You are a test assistant.",
		Tools:          []string{"Read", "Write", "Edit", "Glob", "Grep"},
		PermissionMode: "acceptEdits",
		Grace:          2 * time.Second,
	}
}

// waitWarm waits until person has n ready waiting processes and returns
// their pids.
func waitWarm(tb testing.TB, pool *warmPool, person string, n int) []int {
	tb.Helper()
	var pids []int
	waitFor(tb, 60*time.Second, func() bool {
		pids = pool.WarmPids(person)
		return len(pids) == n
	})
	return pids
}

// pooledSession is a session of person named name on the pool, resuming
// resume when it is not "".
func pooledSession(tb testing.TB, env *clitest.Env, pool *warmPool, person, name, resume string, rec *clitest.Recorder) *supervisor.CLI {
	tb.Helper()
	return newSession(tb, env, rec, func(c *supervisor.CLIConfig) {
		c.ID += "-" + name
		c.Person = person
		c.Dir = env.Vault(person)
		c.Spec = testSpec(env)
		c.CLISessionID = resume
		pool.mu.Lock()
		if p := pool.prompt[person]; p != "" {
			c.Spec.SystemPrompt = p
		}
		pool.mu.Unlock()
		c.Pool = pool.Pool
	})
}

// lastEnd is the last turn end rec saw.
func lastEnd(rec *clitest.Recorder) supervisor.Event {
	events := rec.Events()
	for i := len(events) - 1; i >= 0; i-- {
		if events[i].Kind == supervisor.EventTurnEnd {
			return events[i]
		}
	}
	return supervisor.Event{}
}

// sampleMost records, until the test ends, the most claude process groups
// of the test and the most processes the pool counted at once.
func sampleMost(tb testing.TB, env *clitest.Env, pool *warmPool) (most func() int) {
	tb.Helper()
	var mu sync.Mutex
	n := 0
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			c := countClaudes(tb, env.Home)
			mu.Lock()
			n = max(n, c, pool.Live())
			mu.Unlock()
		}
	}()
	var once sync.Once
	halt := func() { once.Do(func() { close(stop); <-sampled }) }
	tb.Cleanup(halt)
	return func() int {
		halt()
		mu.Lock()
		defer mu.Unlock()
		return n
	}
}

// TestWarmPoolThroughCLI runs a warm pool of one waiting process per
// person and at most five processes through the real CLI, step by step.
// It proves that:
//   - a waiting process that died is replaced;
//   - a waiting process never serves another person: petra's session
//     starts its own, sebastian's waiting process stays, and petra's
//     message makes her active so she gets one of her own;
//   - a new session's first turn runs in the waiting process (no start),
//     its conversation id is recorded, and a replacement starts;
//   - that process serves many turns: the model sees the growing history,
//     the process and state stay, unmodelled events pass through, a send
//     during a turn is ErrBusy, and an interrupt ends the turn in-band;
//   - a process killed mid-turn ends the turn with ErrProcessExited, its
//     group is gone, and the next turn resumes the conversation in a new
//     process, never in a waiting one;
//   - a waiting process started with another configuration never serves
//     a session and is replaced;
//   - a brand-new CLI knowing only the conversation id (as after a server
//     restart) resumes it; when the pool is full the least recently used
//     idle session gives its slot up to it, and a waiting process only
//     when no session is idle; a recently active person's waiting process
//     then comes back in an idle session's slot;
//   - there are never more processes than the limit, and nothing the
//     pool started outlives it.
func TestWarmPoolThroughCLI(t *testing.T) {
	t.Parallel()
	env := clitest.New(t, nil)
	const limit = 5
	pool := newWarmPool(t, env, supervisor.PoolConfig{Max: limit, SlotWait: 60 * time.Second}, 1)
	most := sampleMost(t, env, pool)
	stats := func(t *testing.T, starts, taken int64) {
		t.Helper()
		if st := pool.Stats(); st.Starts != starts || st.Taken != taken {
			t.Fatalf("stats: %+v, want %d starts by sessions and %d taken", st, starts, taken)
		}
	}
	step := func(name string, f func(t *testing.T)) {
		if !t.Run(name, f) {
			t.FailNow()
		}
	}

	var sebWaiting []int
	step("dead waiting process is replaced", func(t *testing.T) {
		pool.Touch("sebastian")
		first := waitWarm(t, pool, "sebastian", 1)
		if err := syscall.Kill(-first[0], syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 60*time.Second, func() bool {
			sebWaiting = pool.WarmPids("sebastian")
			return len(sebWaiting) == 1 && sebWaiting[0] != first[0]
		})
	})

	// Sessions live until the test ends, holding their slots.
	petraRec := clitest.NewRecorder()
	petra := pooledSession(t, env, pool, "petra", "petra", "", petraRec)
	var petraWaiting []int
	step("waiting process serves only its person", func(t *testing.T) {
		if got := petraRec.Turn(t, petra, "[[say for petra]]"); got != "for petra" {
			t.Fatalf("petra's turn: %q", got)
		}
		if petra.Pid() == sebWaiting[0] {
			t.Fatal("petra's session ran in sebastian's waiting process")
		}
		stats(t, 1, 0)
		if got := pool.WarmPids("sebastian"); !slices.Equal(got, sebWaiting) {
			t.Fatalf("sebastian's waiting processes changed: %v, were %v", got, sebWaiting)
		}
		// Petra's message made her active: she gets one of her own.
		if petraWaiting = waitWarm(t, pool, "petra", 1); petraWaiting[0] == sebWaiting[0] {
			t.Fatal("petra's waiting process is sebastian's")
		}
	})

	rec := clitest.NewRecorder()
	s := pooledSession(t, env, pool, "sebastian", "sebastian", "", rec)
	step("new session starts in the waiting process", func(t *testing.T) {
		if got := rec.Turn(t, s, "[[say first answer]]"); got != "first answer" {
			t.Fatalf("first turn text = %q", got)
		}
		if ev := lastEnd(rec); ev.Msg == nil || ev.Msg.IsError {
			t.Fatalf("first turn ended without the CLI's result: %+v", ev.Msg)
		}
		if s.Pid() != sebWaiting[0] {
			t.Fatalf("first turn ran in pid %d, the waiting process was %d", s.Pid(), sebWaiting[0])
		}
		stats(t, 1, 1)
		if s.CLISessionID() == "" {
			t.Fatal("no cli session id recorded for the pooled conversation")
		}
	})
	step("many turns on one process", func(t *testing.T) {
		pid := s.Pid()
		rec.Turn(t, s, "second message")
		if got, want := rec.Turn(t, s, "[[recall]]"), "HISTORY: [[say first answer]] | second message | [[recall]]"; got != want {
			t.Fatalf("the model did not see the growing history:\n got %q\nwant %q", got, want)
		}
		if s.Pid() != pid {
			t.Fatalf("process changed between turns: %d then %d", pid, s.Pid())
		}
		if s.State() != supervisor.StateIdle {
			t.Fatalf("state after turns = %s", s.State())
		}
		// Events the supervisor does not model (system/status, ...)
		// arrive as the CLI wrote them.
		unmodelled := rec.Count(func(ev supervisor.Event) bool {
			return ev.Kind == supervisor.EventCLI && ev.Msg.Type == "system" && ev.Msg.Subtype == "status" &&
				strings.HasPrefix(string(ev.Msg.Raw), `{"type":"system","subtype":"status"`)
		})
		if unmodelled == 0 {
			t.Fatal("no system/status event passed through")
		}
	})
	step("busy while a turn runs, and interrupted", func(t *testing.T) {
		send(t, s, "[[slow 200 100]]")
		if err := s.Send(context.Background(), "again"); !errors.Is(err, supervisor.ErrBusy) {
			t.Fatalf("second send during a turn: %v, want ErrBusy", err)
		}
		waitFor(t, 30*time.Second, func() bool { return strings.Contains(rec.Text(), "tick") })
		pid := s.Pid()
		if err := s.Interrupt(context.Background()); err != nil {
			t.Fatal(err)
		}
		end := rec.WaitEnd(t, 60*time.Second)
		if !end.Interrupted {
			t.Fatalf("turn end not marked interrupted: %+v", end)
		}
		if end.Msg == nil || end.Msg.TerminalReason != "aborted_streaming" {
			t.Fatalf("turn did not end with the CLI's result: err=%v msg=%+v", end.Err, end.Msg)
		}
		if s.Pid() != pid {
			t.Fatal("interrupt replaced the process; it should be in-band")
		}
		if got := rec.Turn(t, s, "[[say after interrupt]]"); got != "after interrupt" {
			t.Fatalf("turn after interrupt: %q", got)
		}
	})
	step("a replacement waits for the next new session", func(t *testing.T) {
		// It started while the turns above ran.
		next := waitWarm(t, pool, "sebastian", 1)
		if next[0] == sebWaiting[0] {
			t.Fatal("the taken process still counts as waiting")
		}
		sebWaiting = next
	})
	const before = "HISTORY: [[say first answer]] | second message | [[recall]] | "
	step("killed mid-turn resumes in a new process", func(t *testing.T) {
		send(t, s, "[[slow 200 100]]")
		waitFor(t, 30*time.Second, func() bool { return strings.Contains(rec.Text(), "tick") })
		pid := s.Pid()
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		end := rec.WaitEnd(t, 60*time.Second)
		if !errors.Is(end.Err, supervisor.ErrProcessExited) {
			t.Fatalf("turn end after kill: %v", end.Err)
		}
		assertGroupGone(t, pid)
		// The completed turns are history; the killed one's message may
		// or may not have reached the CLI's transcript before the kill.
		if got := rec.Turn(t, s, "[[recall]]"); !strings.HasPrefix(got, before) || !strings.HasSuffix(got, "[[recall]]") {
			t.Fatalf("history after respawn = %q", got)
		}
		if s.Pid() == pid || s.Pid() == 0 {
			t.Fatalf("expected a new process, got pid %d (old %d)", s.Pid(), pid)
		}
		// A resumed conversation never takes a waiting process.
		if slices.Contains(sebWaiting, s.Pid()) {
			t.Fatal("the resumed session took a waiting process")
		}
		stats(t, 2, 1)
	})
	// Sebastian's sessions now start with another system prompt: the
	// waiting process started with the old one never serves them, and is
	// replaced.
	pool.mu.Lock()
	pool.prompt["sebastian"] = "You are another test assistant."
	pool.mu.Unlock()
	otherRec := clitest.NewRecorder()
	other := pooledSession(t, env, pool, "sebastian", "other", "", otherRec)
	step("outdated waiting process is replaced", func(t *testing.T) {
		if got := otherRec.Turn(t, other, "[[say fresh]]"); got != "fresh" {
			t.Fatalf("turn: %q", got)
		}
		if other.Pid() == sebWaiting[0] {
			t.Fatal("a session ran in a process started with another system prompt")
		}
		stats(t, 3, 1)
		waitFor(t, 60*time.Second, func() bool {
			pids := pool.WarmPids("sebastian")
			return len(pids) == 1 && pids[0] != sebWaiting[0]
		})
		assertGroupGone(t, sebWaiting[0])
		sebWaiting = pool.WarmPids("sebastian")
		if got := pool.WarmPids("petra"); !slices.Equal(got, petraWaiting) {
			t.Fatalf("petra's waiting processes changed: %v, were %v", got, petraWaiting)
		}
	})
	// A session of the test's, not of the step's: it lives on.
	rec2 := clitest.NewRecorder()
	s2 := pooledSession(t, env, pool, "sebastian", "restarted", s.CLISessionID(), rec2)
	step("new CLI resumes in the slot of the least recently used idle session", func(t *testing.T) {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, func() bool { return pool.Live() == limit-1 })
		// A terminal holds the freed slot until the pool closes: the pool
		// is full.
		if _, err := pool.Hold(context.Background(), "petra"); err != nil {
			t.Fatal(err)
		}
		if st := pool.Stats(); st.Live != limit || st.Warm != 2 {
			t.Fatalf("stats before the resume: %+v, want a full pool with two waiting", st)
		}
		if got := rec2.Turn(t, s2, "[[recall]]"); !strings.HasPrefix(got, before) || !strings.HasSuffix(got, "[[recall]] | [[recall]]") {
			t.Fatalf("resumed history = %q", got)
		}
		if slices.Contains(sebWaiting, s2.Pid()) {
			t.Fatal("the resumed session took a waiting process")
		}
		// Petra's session, idle the longest, gave up its process; both
		// waiting processes are worth more and stay.
		if petra.Live() || !other.Live() {
			t.Fatalf("live: petra's session %v, the other %v; want only petra's stopped", petra.Live(), other.Live())
		}
		if got := append(pool.WarmPids("sebastian"), pool.WarmPids("petra")...); !slices.Equal(got, append(sebWaiting, petraWaiting...)) {
			t.Fatalf("waiting after the resume: %v, were %v and %v", got, sebWaiting, petraWaiting)
		}
		if st := pool.Stats(); st.Live != limit || st.Starts != 4 {
			t.Fatalf("stats after the resume: %+v", st)
		}
	})
	step("with no session idle a waiting process yields its slot, and comes back in an idle one's", func(t *testing.T) {
		send(t, other, "[[slow 60 100]]")
		send(t, s2, "[[slow 60 100]]")
		// Petra's session resumes while both others run turns: only a
		// waiting process can give up its slot, the longest waiting one.
		if got := petraRec.Turn(t, petra, "[[say back]]"); got != "back" {
			t.Fatalf("petra's turn: %q", got)
		}
		if pids := pool.WarmPids("petra"); len(pids) != 0 {
			t.Fatalf("petra's waiting process %v still waits", pids)
		}
		assertGroupGone(t, petraWaiting[0])
		otherRec.WaitEnd(t, 60*time.Second)
		// Petra is active: her one waiting process outranks the least
		// recently used idle session, which is stopped for it.
		petraWaiting = waitWarm(t, pool, "petra", 1)
		live := 0
		for _, c := range []*supervisor.CLI{petra, other, s2} {
			if c.Live() {
				live++
			}
		}
		if live != 2 || petra.Live() && other.Live() && s2.Live() {
			t.Fatalf("%d sessions live after petra's waiting process came back, want 2", live)
		}
	})
	if n := most(); n > limit {
		t.Fatalf("%d claude processes at once with at most %d", n, limit)
	}
	step("nothing waiting outlives the pool", func(t *testing.T) {
		// Closed before the sessions end: their slots would go to new
		// waiting processes.
		pool.close(t)
	})
}

// countClaudes counts the process groups of this test's CLIs: the live
// processes whose environment has this test's HOME.
func countClaudes(tb testing.TB, home string) int {
	tb.Helper()
	groups := map[int]bool{}
	for _, pid := range procgroup.All() {
		env, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "environ"))
		if err != nil || !slices.Contains(strings.Split(string(env), "\x00"), "HOME="+home) {
			continue
		}
		if p, ok := procgroup.Read(pid); ok && !p.Ended() {
			groups[p.PGID] = true
		}
	}
	return len(groups)
}

// TestWarmPoolStaysWarmInSteadyUse: a person opens one new chat after
// another, each kept (its CLI idle), with a share of two processes. Every
// new chat starts in a waiting process: once the person's share is full
// of idle chats, the least recently used one is stopped to start the
// next waiting process, and it resumes its conversation on its next
// message. The pool never runs more than its limit.
func TestWarmPoolStaysWarmInSteadyUse(t *testing.T) {
	t.Parallel()
	env := clitest.New(t, nil)
	const limit = 4
	pool := newWarmPool(t, env, supervisor.PoolConfig{Max: limit, MaxPerPerson: 2, SlotWait: 60 * time.Second}, 1)
	most := sampleMost(t, env, pool)
	pool.Touch("sebastian")
	var chats []*supervisor.CLI
	var recs []*clitest.Recorder
	for i := range 3 {
		waiting := waitWarm(t, pool, "sebastian", 1)
		rec := clitest.NewRecorder()
		c := pooledSession(t, env, pool, "sebastian", "chat"+strconv.Itoa(i), "", rec)
		if got := rec.Turn(t, c, "[[say chat "+strconv.Itoa(i)+"]]"); got != "chat "+strconv.Itoa(i) {
			t.Fatalf("chat %d: %q", i, got)
		}
		if c.Pid() != waiting[0] {
			t.Fatalf("new chat %d ran in pid %d, not in the waiting process %d", i, c.Pid(), waiting[0])
		}
		chats, recs = append(chats, c), append(recs, rec)
	}
	// The share is full with the last two chats, and the next waiting
	// process stopped the one before them.
	waitWarm(t, pool, "sebastian", 1)
	if chats[0].Live() || chats[1].Live() || !chats[2].Live() {
		t.Fatalf("live chats: %v %v %v; want only the last one, beside the waiting process", chats[0].Live(), chats[1].Live(), chats[2].Live())
	}
	if got := recs[0].Turn(t, chats[0], "[[recall]]"); got != "HISTORY: [[say chat 0]] | [[recall]]" {
		t.Fatalf("the stopped chat did not resume its conversation: %q", got)
	}
	if st := pool.Stats(); st.Taken != 3 || st.Starts != 1 {
		t.Fatalf("stats %+v: want 3 new chats in waiting processes and 1 start (the resume)", st)
	}
	if n := most(); n > limit {
		t.Fatalf("%d claude processes at once with at most %d", n, limit)
	}
}
