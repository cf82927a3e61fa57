package supervisor_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/clitest"
	"github.com/majorhq/major/internal/procgroup"
	"github.com/majorhq/major/sandbox"
	"github.com/majorhq/major/supervisor"
)

// escapee is a shell script that starts a process that leaves the
// script's process group (setsid) keeping its stdout, waits until that
// process has written its pid to pidFile, and exits with status 3: a CLI
// whose MCP server or hook command left a daemon behind, then crashed.
func escapee(pidFile string) string {
	return `setsid sh -c 'echo $$ > ` + pidFile + `; exec sleep 600' &
while [ ! -s ` + pidFile + ` ]; do sleep 0.01; done
exit 3`
}

// A process that left the CLI's group and holds its stdout does not keep
// the CLI from being reaped: once the CLI has exited and its group is
// gone, OnExit comes (with the CLI's exit status) and Done closes,
// whoever still holds the pipe. Without the sandbox the escapee lives on
// (it is outside every group the server kills); in the sandbox it dies
// with the sandbox's PID namespace.
func TestReapDoesNotWaitForAProcessThatLeftTheGroup(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		sandboxed bool
	}{
		{"sandbox off", false},
		{"in the sandbox", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			pidFile := filepath.Join(dir, "escapee.pid")
			argv := []string{"/bin/sh", "-c", escapee(pidFile)}
			if c.sandboxed {
				sb, err := sandbox.New(context.Background(), sandbox.Config{})
				if err != nil {
					t.Fatalf("%v (scripts/install-bubblewrap.sh installs bubblewrap)", err)
				}
				argv = sb.Command(sandbox.Box{Dir: dir}, argv...)
			}
			exited := make(chan error, 1)
			p, err := supervisor.StartProcess(supervisor.ProcessConfig{
				Path: argv[0], Args: argv[1:], Dir: dir, Env: []string{"PATH=/usr/bin:/bin"},
				OnExit: func(err error) { exited <- err },
				Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel),
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { killEscapee(t, pidFile, c.sandboxed) })
			select {
			case err := <-exited:
				if err == nil || !strings.Contains(err.Error(), "exit status 3") {
					t.Fatalf("OnExit got %v, want the exit status", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the CLI was never reaped: a process outside its group holds its stdout")
			}
			select {
			case <-p.Done():
			default:
				t.Fatal("OnExit came before Done")
			}
			if live := procgroup.Live(p.Pid()); len(live) != 0 {
				t.Fatalf("the CLI's group is still there: %v", live)
			}
			if !c.sandboxed {
				// The scenario is real: the escapee held the pipe all along.
				if pid := readPid(t, pidFile); syscall.Kill(pid, 0) != nil {
					t.Fatalf("the escapee %d is gone; the test proves nothing", pid)
				}
			}
		})
	}
}

func readPid(tb testing.TB, path string) int {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		tb.Fatal(err)
	}
	return pid
}

// killEscapee ends the process a test's script left outside its group;
// one in a sandbox is gone with it (its pid is the sandbox's own).
func killEscapee(tb testing.TB, pidFile string, sandboxed bool) {
	tb.Helper()
	if sandboxed {
		return
	}
	if b, err := os.ReadFile(pidFile); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// A CLI that dies between turns, after its MCP server left a process
// behind outside the CLI's group that holds the CLI's stdout, gives back
// its slot and its session: the session sees the exit, the pool's one
// slot is free, and the next message starts a process that resumes the
// conversation.
func TestACLIWhoseChildLeftTheGroupIsRecovered(t *testing.T) {
	t.Parallel()
	env := clitest.New(t, nil)
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "escapee.pid")
	// The MCP server hands the daemon it starts its CLI's stdout.
	script := `setsid sh -c 'echo $$ > ` + pidFile + `; exec sleep 600' > /proc/$PPID/fd/1 2>/dev/null < /dev/null &`
	mcp, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{
		"keeper": map[string]any{"command": "/bin/sh", "args": []string{"-c", script}},
	}})
	mcpFile := filepath.Join(dir, "mcp.json")
	if err := os.WriteFile(mcpFile, mcp, 0o600); err != nil {
		t.Fatal(err)
	}
	pool := supervisor.NewPool(supervisor.PoolConfig{Max: 1, SlotWait: time.Minute})
	t.Cleanup(pool.Close)
	rec := clitest.NewRecorder()
	s := newSession(t, env, rec, func(c *supervisor.CLIConfig) {
		c.Pool = pool
		c.Spec.MCPConfigFiles = []string{mcpFile}
	})
	rec.Turn(t, s, "[[say one]]")
	t.Cleanup(func() { killEscapee(t, pidFile, false) })
	waitFor(t, 30*time.Second, func() bool { b, _ := os.ReadFile(pidFile); return len(b) > 0 })

	// The CLI dies between turns: killed, as a shutdown whose time is up
	// kills every process (the escapee is outside the group).
	pool.Kill()
	waitFor(t, 30*time.Second, func() bool { return !s.Live() && pool.Live() == 0 })
	if pid := readPid(t, pidFile); syscall.Kill(pid, 0) != nil {
		t.Fatalf("the escapee %d is gone; the test proves nothing", pid)
	}
	if got := rec.Turn(t, s, "[[recall]]"); got != "HISTORY: [[say one]] | [[recall]]" {
		t.Fatalf("the next turn after the crash: %q", got)
	}
}
