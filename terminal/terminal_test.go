package terminal_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/hooks"
	"github.com/majorhq/major/supervisor"
	"github.com/majorhq/major/terminal"
)

// chat is a session that always hands its conversation over.
type chat struct {
	mu     sync.Mutex
	closed int
}

func (c *chat) OpenTerminal() (string, error) { return "", nil }

func (c *chat) CloseTerminal(string) {
	c.mu.Lock()
	c.closed++
	c.mu.Unlock()
}

func (c *chat) Notice(string) {}

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
}

func newWorld(tb testing.TB, script string, cfg terminal.Config) *world {
	tb.Helper()
	log := zerolog.New(zerolog.NewTestWriter(tb)).Level(zerolog.WarnLevel)
	cmds, err := hooks.ListenCommands(hooks.CommandConfig{Socket: filepath.Join(tb.TempDir(), "hooks.sock"), Logger: log})
	if err != nil {
		tb.Fatal(err)
	}
	pool := supervisor.NewPool(supervisor.PoolConfig{Max: 1, SlotWait: time.Second, Logger: log})
	vault := tb.TempDir()
	cfg.Claude = "/bin/sh"
	cfg.Env = []string{"HOME=" + tb.TempDir(), "PATH=/usr/bin:/bin"}
	cfg.Args = func(string, string, string) ([]string, error) { return []string{"-c", script}, nil }
	cfg.Dir = func(string) string { return vault }
	cfg.Commands, cfg.Pool, cfg.Logger = cmds, pool, log
	m := terminal.NewManager(cfg)
	tb.Cleanup(func() {
		m.Close()
		pool.Close()
		_ = cmds.Close()
	})
	return &world{Manager: m, pool: pool}
}

// notReading is a program that puts its terminal in raw mode, as the CLI
// does, and then reads nothing, as a suspended CLI does.
const notReading = "stty raw -echo && exec sleep 600"

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

// groupGone reports whether no process of group pgid is left.
func groupGone(pgid int) bool {
	return errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH)
}

// Keystrokes the terminal's program does not read never keep a client
// waiting, nor the terminal from ending: a client pastes about 900 KB,
// more than the pty holds, into a program that reads nothing, and however
// the terminal then ends its program is gone, its process slot free and
// no goroutine left behind (goleak, in TestMain). That holds too when a
// process outside the terminal's group keeps the pty open, so the pty's
// writes cannot fail on their own.
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
		{"a process outside its group keeps the pty open", "stty raw -echo && setsid sleep 600 & echo $! > keeper.pid; exec sleep 600",
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
