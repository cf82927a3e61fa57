package terminal_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/attachments"
	"github.com/majorhq/major/hooks"
	"github.com/majorhq/major/internal/procgroup"
	"github.com/majorhq/major/relay"
	"github.com/majorhq/major/supervisor"
	"github.com/majorhq/major/terminal"
)

// chat is a session that hands its conversation over to one terminal at
// a time, as relay's does.
type chat struct {
	mu     sync.Mutex
	open   bool
	opened int
	closed int
}

func (c *chat) CanOpenTerminal() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.open {
		return relay.ErrTerminalOpen
	}
	return nil
}

func (c *chat) OpenTerminal() (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.open {
		return "", relay.ErrTerminalOpen
	}
	c.open = true
	c.opened++
	return "", nil
}

func (c *chat) CloseTerminal(string) {
	c.mu.Lock()
	c.open = false
	c.closed++
	c.mu.Unlock()
}

// opens is how many times the chat handed its conversation over.
func (c *chat) opens() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.opened
}

func (c *chat) Notice(string) {}

func (c *chat) LastEntry() string { return "" }

func (c *chat) TerminalTurns([]attachments.HistoryEntry, string) {}

// closes is how many times the terminal gave the conversation back.
func (c *chat) closes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// world is a Manager whose terminals run script (sh -c) instead of the
// CLI, each holding one of pool's slots.
type world struct {
	*terminal.Manager
	pool *supervisor.Pool
	// dir is the script's working folder; pids the pool's orphan records.
	dir, pids string
	// launches counts the terminals' programs about to start.
	launches atomic.Int32
}

func newWorld(tb testing.TB, script string, cfg terminal.Config) *world {
	tb.Helper()
	log := zerolog.New(zerolog.NewTestWriter(tb)).Level(zerolog.WarnLevel)
	cmds, err := hooks.ListenCommands(hooks.CommandConfig{Socket: filepath.Join(tb.TempDir(), "hooks.sock"), Logger: log})
	if err != nil {
		tb.Fatal(err)
	}
	// A slot wait never ends on its own here: what ends it is the test's.
	pids := filepath.Join(tb.TempDir(), "pids")
	pool := supervisor.NewPool(supervisor.PoolConfig{Max: 1, SlotWait: time.Hour, PIDDir: pids, Logger: log})
	dir := tb.TempDir()
	home := tb.TempDir()
	w := &world{pool: pool, dir: dir, pids: pids}
	cfg.Launch = func(string, string, string, string) (terminal.Launch, error) {
		w.launches.Add(1)
		return terminal.Launch{Argv: []string{"/bin/sh", "-c", script}, Env: []string{"HOME=" + home, "PATH=/usr/bin:/bin"}}, nil
	}
	cfg.Dir = func(string) string { return dir }
	cfg.Commands, cfg.Pool, cfg.Logger = cmds, pool, log
	w.Manager = terminal.NewManager(cfg)
	tb.Cleanup(func() {
		w.Close()
		pool.Close()
		_ = cmds.Close()
	})
	return w
}

// records are the process groups in the orphan records.
func (w *world) records(tb testing.TB) []string {
	tb.Helper()
	entries, err := os.ReadDir(w.pids)
	if err != nil {
		tb.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// notReading is a program that puts its terminal in raw mode, as the CLI
// does, and then reads nothing, as a suspended CLI does.
const notReading = "stty raw -echo; exec sleep 600"

// paste is about size bytes of lines, as a person pastes them.
func paste(size int) []byte {
	var b strings.Builder
	for i := 0; b.Len() < size; i++ {
		b.WriteString("line " + strconv.Itoa(i) + " of a long paste into the terminal\n")
	}
	return []byte(b.String())
}

// within fails unless done is closed in time; what it waits for never
// takes long unless something is stuck.
func within(tb testing.TB, what string, done <-chan struct{}) {
	tb.Helper()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		tb.Fatalf("stuck: %s", what)
	}
}

func eventually(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// groupGone reports whether no live process of group pgid is left
// within a few seconds (a killed member may stay a zombie until init
// reaps it; it has ended).
func groupGone(pgid int) bool {
	return len(procgroup.WaitGone(pgid, 5*time.Second)) == 0
}

// Keystrokes the terminal's program does not read never keep a client
// waiting, nor the terminal from ending: a client pastes about 900 KB,
// more than the pty holds, into a program that reads nothing, and however
// the terminal then ends its program is gone, its process slot free and
// no goroutine left behind (goleak, in TestMain). That holds too when a
// process outside the terminal's group keeps the pty open, so that the
// pty's writes do not fail on their own.
func TestInputNeverHoldsUpTheEnd(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		script string
		end    func(*world, *terminal.Client)
	}{
		{"the client ends it", notReading, func(_ *world, c *terminal.Client) { c.End() }},
		{"the client leaves", notReading, func(_ *world, c *terminal.Client) { c.Detach() }},
		{"the server shuts down", notReading, func(w *world, _ *terminal.Client) { w.Close() }},
		{"a process outside its group keeps the pty open", "stty raw -echo; setsid sleep 600 & echo $! > keeper.pid; exec sleep 600",
			func(_ *world, c *terminal.Client) { c.End() }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, c.script, terminal.Config{Grace: 50 * time.Millisecond})
			ch := &chat{}
			client, err := w.Attach(context.Background(), "s1", "sebastian", ch)
			if err != nil {
				t.Fatal(err)
			}
			pid := w.Pid("s1")
			t.Cleanup(func() { killKeeper(t, w) })

			typed := make(chan struct{})
			go func() {
				defer close(typed)
				for b := paste(900 << 10); len(b) > 0; {
					n := min(len(b), 32<<10)
					_ = client.Write(b[:n])
					b = b[n:]
				}
			}()
			within(t, "the client waits for the program to read its paste", typed)

			c.end(w, client)
			eventually(t, "the terminal's end", func() bool { return w.Live() == 0 && ch.closes() == 1 })
			if !groupGone(pid) {
				t.Error("the terminal's process group is still there")
			}
			if n := w.pool.Live(); n != 0 {
				t.Errorf("%d process slots still held", n)
			}
		})
	}
}

// killKeeper ends the process a test's script started outside the
// terminal's group, if it did.
func killKeeper(tb testing.TB, w *world) {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(w.dir, "keeper.pid"))
	if err != nil {
		return
	}
	if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// A client that types more than the terminal holds for its program is
// cut off, rather than the terminal held up or its memory grown: the
// client's output ends with ErrTooMuchInput, and the terminal keeps
// running for a client to attach again.
func TestAClientTypingTooMuchIsCutOff(t *testing.T) {
	t.Parallel()
	w := newWorld(t, notReading, terminal.Config{InputBuffer: 64 << 10, Grace: time.Minute})
	ch := &chat{}
	client, err := w.Attach(context.Background(), "s1", "sebastian", ch)
	if err != nil {
		t.Fatal(err)
	}
	// Far more than the buffer and the pty hold together.
	chunk := paste(16 << 10)[:16<<10]
	for i := 0; i < 100 && err == nil; i++ {
		err = client.Write(chunk)
	}
	if !errors.Is(err, terminal.ErrTooMuchInput) {
		t.Fatalf("typing 1.6 MB into a program that reads nothing: %v", err)
	}
	outputEnded := make(chan struct{})
	go func() {
		defer close(outputEnded)
		for range client.Output() {
		}
	}()
	within(t, "the client's output to end", outputEnded)
	if !errors.Is(client.Err(), terminal.ErrTooMuchInput) {
		t.Fatalf("the client's output ended with %v", client.Err())
	}
	if err := client.Write([]byte("x")); !errors.Is(err, terminal.ErrTooMuchInput) {
		t.Fatalf("typing after the cut: %v", err)
	}

	again, err := w.Attach(context.Background(), "s1", "sebastian", ch)
	if err != nil || w.Live() != 1 {
		t.Fatalf("attach again: %v, %d terminals", err, w.Live())
	}
	again.End()
	eventually(t, "the terminal's end", func() bool { return w.Live() == 0 && ch.closes() == 1 })
}

// What a client types reaches the program in order, and so does the size
// it sets: the program waits for a line, then says its terminal's size
// and the line it read.
func TestKeystrokesAndSizeReachTheProgram(t *testing.T) {
	t.Parallel()
	w := newWorld(t, `stty -echo; read -r line; echo "size $(stty size) line $line"; exec sleep 600`, terminal.Config{})
	ch := &chat{}
	client, err := w.Attach(context.Background(), "s1", "sebastian", ch)
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Resize(132, 43); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"typed ", "in ", "three parts\r"} {
		if err := client.Write([]byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	var screen strings.Builder
	want := "size 43 132 line typed in three parts"
	for !strings.Contains(screen.String(), want) {
		select {
		case b, ok := <-client.Output():
			if !ok {
				t.Fatalf("the output ended (%v): %q", client.Err(), screen.String())
			}
			screen.Write(b)
		case <-time.After(30 * time.Second):
			t.Fatalf("the program did not say %q: %q", want, screen.String())
		}
	}
	client.End()
	eventually(t, "the terminal's end", func() bool { return w.Live() == 0 })
	if err := client.Resize(80, 24); !errors.Is(err, terminal.ErrEnded) {
		t.Fatalf("resizing an ended terminal: %v", err)
	}
}

// A client that attaches while the terminal is still starting (waiting
// for a process slot) is not refused: it waits for the start and takes
// the terminal over, and only one terminal starts.
func TestAttachingWhileTheTerminalStarts(t *testing.T) {
	t.Parallel()
	w := newWorld(t, notReading, terminal.Config{})
	release, err := w.pool.Hold(context.Background(), "petra") // the one slot
	if err != nil {
		t.Fatal(err)
	}
	ch := &chat{}
	type attached struct {
		c   *terminal.Client
		err error
	}
	attach := func() <-chan attached {
		out := make(chan attached, 1)
		go func() {
			c, err := w.Attach(context.Background(), "s1", "sebastian", ch)
			out <- attached{c, err}
		}()
		return out
	}
	first := attach()
	eventually(t, "the first start", func() bool { return ch.opens() == 1 })
	if err := w.CanAttach("s1", ch); err != nil {
		t.Fatalf("a second client while the terminal starts: %v", err)
	}
	second := attach()
	release()

	var a, b attached
	done := make(chan struct{})
	go func() {
		defer close(done)
		a, b = <-first, <-second
	}()
	within(t, "both clients attached", done)
	if a.err != nil || b.err != nil {
		t.Fatalf("attach: %v, %v", a.err, b.err)
	}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		for range a.c.Output() {
		}
	}()
	within(t, "the first client's output to end", ended)
	if !errors.Is(a.c.Err(), terminal.ErrReplaced) || w.Live() != 1 || ch.opens() != 1 {
		t.Fatalf("first client: %v; %d terminals, %d starts", a.c.Err(), w.Live(), ch.opens())
	}
	b.c.End()
	eventually(t, "the terminal's end", func() bool { return w.Live() == 0 })
}

// A shutdown that begins while a terminal waits for a process slot ends
// the wait: the attach is refused with ErrEnded, the terminal's program
// never starts, the chat has its conversation back, and the shutdown
// does not wait for a slot.
func TestShutdownWhileATerminalWaitsForASlot(t *testing.T) {
	t.Parallel()
	w := newWorld(t, notReading, terminal.Config{})
	release, err := w.pool.Hold(context.Background(), "petra") // the one slot
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	ch := &chat{}
	attached := make(chan error, 1)
	go func() {
		_, err := w.Attach(context.Background(), "s1", "sebastian", ch)
		attached <- err
	}()
	eventually(t, "the start", func() bool { return ch.opens() == 1 })
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		w.Close()
	}()
	within(t, "the shutdown, while a terminal waits for a slot", closed)
	select {
	case err := <-attached:
		if !errors.Is(err, terminal.ErrEnded) {
			t.Fatalf("attach during the shutdown: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the attach is still waiting")
	}
	if n := w.launches.Load(); n != 0 {
		t.Fatalf("%d terminals started after the shutdown began", n)
	}
	if ch.closes() != 1 || w.pool.Live() != 1 || len(w.records(t)) != 0 {
		t.Fatalf("after the shutdown: conversation given back %d times, %d slots held, records %v",
			ch.closes(), w.pool.Live(), w.records(t))
	}
}

// A running terminal's process group is in the orphan records, as a
// session's CLI is: a server that died without ending it kills it when it
// starts again (CleanOrphans). An ended terminal leaves no record.
func TestATerminalIsInTheOrphanRecords(t *testing.T) {
	t.Parallel()
	// The shell stays the group's leader, as bwrap does around the CLI.
	w := newWorld(t, "stty raw -echo; sleep 600", terminal.Config{})
	ch := &chat{}
	for i, end := range []func(*terminal.Client){
		func(c *terminal.Client) { c.End() },
		func(*terminal.Client) {
			if n := supervisor.CleanOrphans(w.pids, zerolog.Nop()); n != 1 {
				t.Errorf("a new server killed %d terminals", n)
			}
		},
	} {
		c, err := w.Attach(context.Background(), "s1", "sebastian", ch)
		if err != nil {
			t.Fatal(err)
		}
		pid := w.Pid("s1")
		if got := w.records(t); len(got) != 1 || got[0] != strconv.Itoa(pid) {
			t.Fatalf("orphan records %v while terminal %d runs", got, pid)
		}
		end(c)
		eventually(t, "the terminal's end", func() bool { return w.Live() == 0 && ch.closes() == i+1 })
		// The shell's child is a zombie until init reaps it.
		if live := procgroup.WaitGone(pid, 3*time.Second); len(live) != 0 {
			t.Errorf("the terminal's process group is still there: %v", live)
		}
		if got := w.records(t); len(got) != 0 {
			t.Fatalf("orphan records %v after the terminal ended", got)
		}
	}
}

// A shutdown's deadline holds for the terminals: one whose program
// ignores the hang-up is killed when it comes, and an Ended hook still
// running then (a commit waiting for a remote) is cut off by it rather
// than by its own minute.
func TestShutdownDeadlineEndsTerminalsAndTheirHooks(t *testing.T) {
	t.Parallel()
	hookCut := make(chan error, 1)
	w := newWorld(t, "trap '' HUP; stty raw -echo; exec sleep 600", terminal.Config{
		Ended: func(ctx context.Context, _, _ string) string {
			<-ctx.Done()
			hookCut <- ctx.Err()
			return ""
		},
	})
	ch := &chat{}
	if _, err := w.Attach(context.Background(), "s1", "sebastian", ch); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the shutdown's time is up at once
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Shutdown(ctx)
	}()
	within(t, "the shutdown", done)
	select {
	case err := <-hookCut:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the hook's context ended with %v", err)
		}
	default:
		t.Fatal("the shutdown returned before the terminal's hook")
	}
	if w.Live() != 0 || ch.closes() != 1 || len(w.records(t)) != 0 {
		t.Fatalf("after the shutdown: %d terminals, conversation given back %d times, records %v", w.Live(), ch.closes(), w.records(t))
	}
}
