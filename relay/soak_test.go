package relay_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
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
	"github.com/majorhq/major/relay"
	"github.com/majorhq/major/supervisor"
)

// soakFor is how long TestSoakRandomKills runs; 0 is its short form
// (make test). make bench runs it for 10 minutes.
var soakFor = flag.Duration("soak", 0, "how long TestSoakRandomKills runs (0: 10s)")

// TestSoakRandomKills runs three chats on two process slots through the
// real CLI (sandboxed, through the gateway) while their processes are
// killed at random: at a random step of Send, or at a random moment of
// the turn; turns are interrupted at random too, and some wait for a
// slot. Every message's client gets exactly one done or error (or its
// message fails to start), every chat keeps taking messages, and at the
// end the pool counts exactly the processes that run, and none is left
// once the sessions close.
func TestSoakRandomKills(t *testing.T) {
	t.Parallel()
	run := *soakFor
	if run <= 0 {
		run = 10 * time.Second
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	var rngMu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	chance := func(n int) bool {
		rngMu.Lock()
		defer rngMu.Unlock()
		return rng.IntN(n) == 0
	}
	pick := func(n int) int {
		rngMu.Lock()
		defer rngMu.Unlock()
		return rng.IntN(n)
	}

	env := clitest.New(t, nil)
	spec := supervisor.Spec{
		Binary:         env.Binary,
		Sandbox:        env.Sandbox(t, "sebastian"),
		SystemPrompt:   "You are a test assistant.",
		Tools:          []string{"Read", "Glob", "Grep"},
		PermissionMode: "default",
		Grace:          2 * time.Second,
	}
	spec.Env, spec.Credential = env.Gateway(t)
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel)
	pool := supervisor.NewPool(supervisor.PoolConfig{Max: 2, SlotWait: 2 * time.Minute, Logger: log})
	t.Cleanup(pool.Close)
	kills := 0
	var killMu sync.Mutex
	launch := relay.LauncherFunc(func(p relay.SessionParams) relay.CLI {
		return supervisor.NewCLI(supervisor.CLIConfig{
			ID: p.ID, Person: p.Person, Dir: env.Vault(p.Person), CLISessionID: p.CLISessionID,
			Spec: spec, Sink: p.Sink, Pool: pool, StallTimeout: time.Minute, Logger: log,
			OnSendStep: func(step supervisor.SendStep, proc *supervisor.Process) {
				if proc != nil && chance(8) {
					killMu.Lock()
					kills++
					killMu.Unlock()
					proc.Kill()
				}
			},
		})
	})
	sessions, err := relay.NewRegistry(relay.RegistryConfig{Launcher: launch, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			sessions.Close()
		}
	})

	type tally struct{ turns, failed int }
	chats := make([]*relay.Session, 3)
	tallies := make([]tally, len(chats))
	for i := range chats {
		if chats[i], err = sessions.GetOrCreate("", "sebastian"); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(run)
	var wg sync.WaitGroup
	for i, chat := range chats {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; time.Now().Before(deadline) && !t.Failed(); n++ {
				directive := []string{"[[say fine]]", "[[slow 20 25]]", "[[hang]]"}[pick(3)]
				msg := fmt.Sprintf("chat %d message %d %s", i, n, directive)
				tk, err := sessions.Submit(chat, msg, relay.SubmitOptions{Stream: true})
				if err != nil {
					t.Errorf("submit: %v", err)
					return
				}
				select {
				case <-tk.Started():
				case <-time.After(3 * time.Minute):
					t.Errorf("%q neither started nor failed", msg)
					return
				}
				if tk.Err() != nil {
					tallies[i].failed++
					continue
				}
				tallies[i].turns++
				// A turn is killed, interrupted or left alone; one that
				// hangs always ends by one of the first two.
				action := pick(3)
				if directive == "[[hang]]" && action == 2 {
					action = pick(2)
				}
				if action < 2 {
					time.Sleep(time.Duration(pick(400)) * time.Millisecond)
				}
				switch action {
				case 0:
					if pid := chat.CLI().(*supervisor.CLI).Pid(); pid != 0 {
						killMu.Lock()
						kills++
						killMu.Unlock()
						_ = syscall.Kill(-pid, syscall.SIGKILL)
					}
				case 1:
					_ = chat.Interrupt(context.Background())
				}
				// A turn that still runs after that (a hang whose kill came
				// before its start, and so runs on a new process) is
				// interrupted until it ends.
				end := waitTerminal(chat, tk.Turn(), 3*time.Second)
				for tries := 0; end == nil && tries < 60; tries++ {
					_ = chat.Interrupt(context.Background())
					end = waitTerminal(chat, tk.Turn(), 3*time.Second)
				}
				if end == nil {
					t.Errorf("%q (turn %d) never ended", msg, tk.Turn())
					return
				}

			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	turns, failed := 0, 0
	for i, chat := range chats {
		checkOneEnd(t, chat, tallies[i].turns)
		turns, failed = turns+tallies[i].turns, failed+tallies[i].failed
	}
	t.Logf("%d turns, %d messages that never started, %d kills", turns, failed, kills)

	// The pool counts exactly the processes that run: one per chat that
	// has one, no slot left reserved.
	live := 0
	for _, chat := range chats {
		if chat.CLI().(*supervisor.CLI).Pid() != 0 {
			live++
		}
	}
	if pool.Live() != live || live > 2 {
		t.Errorf("the pool counts %d processes, %d chats have one", pool.Live(), live)
	}
	waitClaudes(t, env.Home, live)
	sessions.Close()
	closed = true
	// A process's slot is given back by its reaper, just after Close saw
	// the process end.
	for deadline := time.Now().Add(5 * time.Second); pool.Live() != 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if pool.Live() != 0 {
		t.Errorf("the pool counts %d processes after the sessions closed", pool.Live())
	}
	waitClaudes(t, env.Home, 0)
}

// waitTerminal waits up to within for the terminal event of turn on
// chat's stream; nil if none came.
func waitTerminal(chat *relay.Session, turn int, within time.Duration) *relay.Event {
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		evs := chat.Stream().Events(0)
		for i := len(evs) - 1; i >= 0 && evs[i].Turn >= turn; i-- {
			if evs[i].Turn == turn && evs[i].Terminal {
				return evs[i]
			}
		}
	}
	return nil
}

// waitClaudes waits until the test's CLIs (the trees of processes whose
// environment has the test's HOME: a sandbox and the CLI in it) are n,
// and fails the test if they do not get there.
func waitClaudes(tb testing.TB, home string, n int) {
	tb.Helper()
	var got int
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if got = countGroups(home); got == n {
			return
		}
	}
	tb.Errorf("%d claude processes run, want %d", got, n)
}

func countGroups(home string) int {
	parents := map[int]int{}
	for _, pid := range procgroup.All() {
		env, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "environ"))
		if err != nil || !slices.Contains(strings.Split(string(env), "\x00"), "HOME="+home) {
			continue
		}
		if p, ok := procgroup.Read(pid); ok && !p.Ended() {
			parents[pid] = p.PPID
		}
	}
	n := 0
	for _, ppid := range parents {
		if _, ok := parents[ppid]; !ok {
			n++
		}
	}
	return n
}
