package supervisor_test

import (
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
	"github.com/majorhq/major/supervisor"
)

// warmPool is a pool whose warm pool launches person's processes as
// newSession's sessions are launched; prompt, when set, overrides the
// system prompt the pool starts processes with.
type warmPool struct {
	*supervisor.Pool
	mu     sync.Mutex
	prompt string
}

func newWarmPool(tb testing.TB, env *clitest.Env, cfg supervisor.PoolConfig, perPerson int) *warmPool {
	tb.Helper()
	cfg.Logger = zerolog.New(zerolog.NewTestWriter(tb)).Level(zerolog.InfoLevel)
	w := &warmPool{Pool: supervisor.NewPool(cfg)}
	w.Warm(supervisor.WarmConfig{PerPerson: perPerson, Launch: func(person string) supervisor.WarmLaunch {
		spec := testSpec(env)
		w.mu.Lock()
		if w.prompt != "" {
			spec.SystemPrompt = w.prompt
		}
		w.mu.Unlock()
		return supervisor.WarmLaunch{Dir: env.Vault(person), Spec: spec}
	}})
	var pids []int
	tb.Cleanup(func() {
		for _, p := range []string{"sebastian", "petra"} {
			pids = append(pids, w.WarmPids(p)...)
		}
		w.Close()
		// Nothing the warm pool started outlives it.
		for _, pid := range pids {
			assertGroupGone(tb, pid)
		}
		if n := w.Stats().Warm; n != 0 {
			tb.Errorf("%d waiting processes after Close", n)
		}
	})
	return w
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

func pooledSession(tb testing.TB, env *clitest.Env, pool *warmPool, person string, rec *clitest.Recorder) *supervisor.CLI {
	tb.Helper()
	return newSession(tb, env, rec, func(c *supervisor.CLIConfig) {
		c.ID += "-" + person
		c.Person = person
		c.Dir = env.Vault(person)
		c.Spec = testSpec(env)
		pool.mu.Lock()
		if pool.prompt != "" {
			c.Spec.SystemPrompt = pool.prompt
		}
		pool.mu.Unlock()
		c.Pool = pool.Pool
	})
}

func TestWarmPoolStartsNewSessionInWaitingProcess(t *testing.T) {
	t.Parallel()
	env := clitest.New(t, nil)
	pool := newWarmPool(t, env, supervisor.PoolConfig{Max: 4}, 1)
	pool.Touch("sebastian")
	ready := waitWarm(t, pool, "sebastian", 1)

	rec := clitest.NewRecorder()
	s := pooledSession(t, env, pool, "sebastian", rec)
	if got := rec.Turn(t, s, "[[say warm answer]]"); got != "warm answer" {
		t.Fatalf("first turn text = %q", got)
	}
	// The turn ran in the process that was waiting: no process was
	// started for it.
	if s.Pid() != ready[0] {
		t.Fatalf("first turn ran in pid %d, the waiting process was %d", s.Pid(), ready[0])
	}
	if st := pool.Stats(); st.Starts != 0 || st.Taken != 1 {
		t.Fatalf("stats after the first turn: %+v, want no start by a session and one taken", st)
	}
	// Its conversation is the session's: its id is recorded and the
	// session resumes it in a new process after a stop.
	if s.CLISessionID() == "" {
		t.Fatal("no cli session id recorded for the pooled conversation")
	}
	// A replacement waits for the next new session.
	next := waitWarm(t, pool, "sebastian", 1)
	if next[0] == ready[0] {
		t.Fatal("the taken process still counts as waiting")
	}
	if !s.StopIfIdle() {
		t.Fatal("no idle process to stop")
	}
	if got, want := rec.Turn(t, s, "[[recall]]"), "HISTORY: [[say warm answer]] | [[recall]]"; got != want {
		t.Fatalf("resumed conversation:\n got %q\nwant %q", got, want)
	}
	// A resumed conversation never takes a waiting process.
	if slices.Contains(next, s.Pid()) {
		t.Fatal("the resumed session took a waiting process")
	}
	if st := pool.Stats(); st.Starts != 1 || st.Taken != 1 {
		t.Fatalf("stats after the resume: %+v, want one start by the session", st)
	}
}

func TestWarmPoolServesOnlyItsPerson(t *testing.T) {
	t.Parallel()
	env := clitest.New(t, nil)
	pool := newWarmPool(t, env, supervisor.PoolConfig{Max: 4}, 1)
	pool.Touch("sebastian")
	ready := waitWarm(t, pool, "sebastian", 1)

	rec := clitest.NewRecorder()
	s := pooledSession(t, env, pool, "petra", rec)
	if got := rec.Turn(t, s, "[[say for petra]]"); got != "for petra" {
		t.Fatalf("petra's turn: %q", got)
	}
	if s.Pid() == ready[0] {
		t.Fatal("petra's session ran in sebastian's waiting process")
	}
	if st := pool.Stats(); st.Starts != 1 || st.Taken != 0 {
		t.Fatalf("stats: %+v, want petra's own start and nothing taken", st)
	}
	if got := pool.WarmPids("sebastian"); !slices.Equal(got, ready) {
		t.Fatalf("sebastian's waiting processes changed: %v, were %v", got, ready)
	}
	// Petra's message made her active: she gets one of her own.
	if pids := waitWarm(t, pool, "petra", 1); pids[0] == ready[0] {
		t.Fatal("petra's waiting process is sebastian's")
	}
}

func TestWarmPoolReplacesDeadAndOutdatedProcesses(t *testing.T) {
	t.Parallel()
	env := clitest.New(t, nil)
	pool := newWarmPool(t, env, supervisor.PoolConfig{Max: 4}, 1)
	pool.Touch("sebastian")
	first := waitWarm(t, pool, "sebastian", 1)

	// One that died while it waited is replaced.
	if err := syscall.Kill(-first[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var second []int
	waitFor(t, 60*time.Second, func() bool {
		second = pool.WarmPids("sebastian")
		return len(second) == 1 && second[0] != first[0]
	})

	// Sessions now start with another system prompt: the one started with
	// the old one never serves them, and is replaced.
	pool.mu.Lock()
	pool.prompt = "You are another test assistant."
	pool.mu.Unlock()
	rec := clitest.NewRecorder()
	s := pooledSession(t, env, pool, "sebastian", rec)
	if got := rec.Turn(t, s, "[[say fresh]]"); got != "fresh" {
		t.Fatalf("turn: %q", got)
	}
	if s.Pid() == second[0] {
		t.Fatal("a session ran in a process started with another system prompt")
	}
	if st := pool.Stats(); st.Starts != 1 || st.Taken != 0 {
		t.Fatalf("stats: %+v, want the session's own start", st)
	}
	waitFor(t, 60*time.Second, func() bool {
		pids := pool.WarmPids("sebastian")
		return len(pids) == 1 && pids[0] != second[0]
	})
	assertGroupGone(t, second[0])
}

func TestWarmPoolYieldsToSessions(t *testing.T) {
	t.Parallel()
	env := clitest.New(t, nil)
	// One slot: the waiting process takes it while it is free, and gives
	// it up to a session that needs it.
	pool := newWarmPool(t, env, supervisor.PoolConfig{Max: 1, SlotWait: 60 * time.Second}, 2)
	var mu sync.Mutex
	most := 0
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
			n := countClaudes(t, env.Home)
			mu.Lock()
			most = max(most, n, pool.Live())
			mu.Unlock()
		}
	}()
	pool.Touch("sebastian")
	ready := waitWarm(t, pool, "sebastian", 1)

	rec := clitest.NewRecorder()
	s := pooledSession(t, env, pool, "petra", rec)
	if got := rec.Turn(t, s, "[[say mine]]"); got != "mine" {
		t.Fatalf("petra's turn: %q", got)
	}
	assertGroupGone(t, ready[0])
	// The pool is full with petra's idle process: nothing waits.
	time.Sleep(200 * time.Millisecond)
	if st := pool.Stats(); st.Warm != 0 || st.Live != 1 {
		t.Fatalf("stats with the pool full: %+v", st)
	}
	close(stop)
	<-sampled
	if most > 1 {
		t.Fatalf("%d claude processes at once with --max-processes 1", most)
	}
}

// countClaudes counts the process groups of this test's CLIs: the live
// processes whose environment has this test's HOME.
func countClaudes(tb testing.TB, home string) int {
	tb.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		tb.Fatal(err)
	}
	groups := map[string]bool{}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !slices.Contains(strings.Split(string(env), "\x00"), "HOME="+home) {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(fields) > 2 && fields[0] != "Z" {
			groups[fields[2]] = true
		}
	}
	return len(groups)
}
