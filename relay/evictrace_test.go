package relay

import (
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/sessionstore"
	"github.com/majorhq/major/supervisor"
)

// Interleavings of an idle session's eviction with what reads or holds the
// session, each one forced with gates: a held fsync for the log writer's
// park, a held call into the CLI for the session's lock.

// gate holds whoever passes it until opened; entered says someone is in.
type gate struct {
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func newGate(tb testing.TB) *gate {
	tb.Helper()
	g := &gate{entered: make(chan struct{}, 64), release: make(chan struct{})}
	tb.Cleanup(g.open)
	return g
}

func (g *gate) pass() {
	select {
	case g.entered <- struct{}{}:
	default:
	}
	<-g.release
}

func (g *gate) open() { g.once.Do(func() { close(g.release) }) }

// gatedIDCLI is a session's CLI whose CLISessionID passes a gate while
// one is armed: whoever asks for it (holding the session's lock) waits.
type gatedIDCLI struct {
	CLI
	mu   sync.Mutex
	gate *gate
}

func (g *gatedIDCLI) arm(gt *gate) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gate = gt
}

func (g *gatedIDCLI) CLISessionID() string {
	g.mu.Lock()
	gt := g.gate
	g.gate = nil
	g.mu.Unlock()
	if gt != nil {
		gt.pass()
	}
	return g.CLI.CLISessionID()
}

// heldSync is a disk whose fsyncs pass the gate held, when one is.
type heldSync struct{ held atomic.Pointer[gate] }

func (d *heldSync) sync(f *os.File) error {
	if g := d.held.Load(); g != nil {
		g.pass()
	}
	return f.Sync()
}

// gatedRegistry is a registry with a store whose fsyncs pass disk's gate,
// whose sessions' CLIs are gatedIDCLIs that run no process. It sweeps
// only when a test calls sweep, and is not closed for the test: a test
// that leaves it deadlocked could not end.
func gatedRegistry(tb testing.TB, disk *heldSync) (*Registry, map[string]*gatedIDCLI) {
	tb.Helper()
	st, err := sessionstore.New(tb.TempDir(), zerolog.Nop())
	if err != nil {
		tb.Fatal(err)
	}
	st.SyncFile = disk.sync
	var mu sync.Mutex
	clis := map[string]*gatedIDCLI{}
	s, err := NewRegistry(RegistryConfig{
		Launcher: LauncherFunc(func(p SessionParams) CLI {
			g := &gatedIDCLI{CLI: supervisor.NewCLI(supervisor.CLIConfig{ID: p.ID, Person: p.Person, Sink: p.Sink})}
			mu.Lock()
			clis[p.ID] = g
			mu.Unlock()
			return g
		}),
		Store: st, EvictAfter: time.Hour, Logger: zerolog.Nop(),
	})
	if err != nil {
		tb.Fatal(err)
	}
	return s, clis
}

// blockedIn reports whether a goroutine waits to lock a mutex in the
// function named fn (its innermost frame of package relay), and returns
// its stack.
func blockedIn(fn string) (bool, string) {
	buf := make([]byte, 1<<20)
	all := string(buf[:runtime.Stack(buf, true)])
	for _, g := range strings.Split(all, "\n\n") {
		lock := strings.Index(g, "sync.(*Mutex).Lock")
		if lock < 0 {
			continue
		}
		rest := g[lock:]
		at := strings.Index(rest, "github.com/majorhq/major/relay.")
		if at >= 0 && strings.HasPrefix(rest[at+len("github.com/majorhq/major/relay."):], fn+"(") {
			return true, g
		}
	}
	return false, ""
}

// A fork of an evicted session while the sweep evicts it again: the fork
// holds the original's lock while it reads its events, which a cold
// stream loads under its upkeep lock; the eviction holds that upkeep lock
// and waits for the session's lock. Neither ever gets the other's: the
// fork never returns, and every later message, attach or history of the
// session (and the registry's Close) waits for ever.
func TestForkWhileTheSessionIsEvicted(t *testing.T) {
	var disk heldSync
	s, clis := gatedRegistry(t, &disk)
	c, _ := s.GetOrCreate("", "sebastian")
	publishTurn(c, "a question", 2)
	if !c.evict() {
		t.Fatal("an idle session was not evicted")
	}
	// Something published while the session is evicted (a status) is
	// written by the log writer; the next eviction's park fsyncs it,
	// and that fsync is held.
	held := newGate(t)
	disk.held.Store(held)
	c.Notice("published while evicted")

	evicted := make(chan bool, 1)
	go func() { evicted <- c.evict() }()
	<-held.entered // the sweep's eviction parks the log writer

	id := newGate(t)
	clis[c.ID].arm(id)
	forked := make(chan error, 1)
	go func() {
		_, err := s.Fork(c.ID, "sebastian")
		forked <- err
	}()
	<-id.entered // the fork holds the session's lock
	held.open()  // the eviction goes on: upkeep, then the session's lock
	for c.stream.upkeep.TryLock() {
		c.stream.upkeep.Unlock()
		runtime.Gosched()
	}
	id.open() // the fork reads the original's events
	// A deadlock never resolves; anything else ends well within the
	// deadline, however loaded the machine. (Both goroutines can be
	// seen waiting on a lock for a moment without any deadlock: the
	// eviction, woken, has not yet run.)
	select {
	case err := <-forked:
		if err != nil {
			t.Fatalf("fork: %v", err)
		}
		<-evicted
		s.Close()
	case <-time.After(20 * time.Second):
		_, forkStack := blockedIn("(*Stream).loadCold")
		_, evictStack := blockedIn("(*Session).evict")
		t.Fatalf("deadlock: the fork waits for the stream's upkeep lock under the session's lock, "+
			"the eviction for the session's lock under the upkeep lock:\n%s\n\n%s", forkStack, evictStack)
	}
}
