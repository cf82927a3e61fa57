package sandbox_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/majorhq/major/sandbox"
)

// A server that runs as root runs its sandboxes as root too: the same uid
// 0 outside, only without capabilities. The kernel lets uid 0 write its
// global settings under /proc/sys by the file's owner alone, and the
// sandbox's /proc shows them writable: kernel.core_pattern names a
// program the kernel runs as the host's root when a process dumps core
// (a pipe, "|/path"; the person's folder is at the same path on the
// host), kernel.randomize_va_space turns address randomisation off for
// the whole machine, fs.suid_dumpable lets setuid programs dump core.
// Each setting is written with the value it has, so the test changes
// nothing; that the write is allowed is the hole.
func TestSandboxWritesNoKernelSetting(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Log("not root: the kernel refuses these writes anyway")
	}
	sb := newSandbox(t)
	for _, setting := range []string{"kernel/core_pattern", "kernel/randomize_va_space", "fs/suid_dumpable"} {
		t.Run(setting, func(t *testing.T) {
			p := "/proc/sys/" + setting
			script := `v=$(cat ` + p + `) && printf '%s\n' "$v" > ` + p + ` && echo WROTE`
			argv := sb.Command(sandbox.Box{Dir: t.TempDir()}, "/bin/sh", "-c", script)
			out, _ := exec.Command(argv[0], argv[1:]...).CombinedOutput()
			if strings.Contains(string(out), "WROTE") {
				t.Errorf("the sandbox writes the host's %s", p)
			}
		})
	}
}

// Nothing bounds how many processes a sandbox runs: no pids cgroup, and
// RLIMIT_NPROC does not hold for root, which a server run as root runs
// its sandboxes as (and is per user otherwise: the server's own user,
// whose processes it counts too). Every sandbox takes its PIDs from the
// host's one pool (kernel.pid_max, 32768 on many machines), shared with
// every other person's sandboxes and the server, which then can start
// no CLI, no git and no hook. A thousand sleeping processes stand for
// the fork bomb the test does not run on a shared machine.
func TestSandboxBoundsItsProcesses(t *testing.T) {
	t.Parallel()
	sb := newSandbox(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// This test binary, in the sandbox, starts as many sleeping processes
	// as it can (up to want) and says how many it could.
	const want = 1000
	argv := sb.Command(sandbox.Box{Dir: t.TempDir(), ReadOnly: []string{self}, Person: "sebastian"}, self, "-test.run=^$")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = []string{forkEnv + "=" + strconv.Itoa(want), "PATH=/usr/bin:/bin"}
	out, err := cmd.Output()
	got, cerr := strconv.Atoi(strings.TrimSpace(string(out)))
	if cerr != nil {
		t.Fatalf("no count: %q (%v)", out, err)
	}
	if got >= want {
		t.Errorf("the sandbox ran %d processes at once, and would run as many as the host's pid_max lets it", got)
	}
}

// forkEnv makes this test binary start that many sleeping processes and
// print how many it could (see TestMain).
const forkEnv = "SANDBOX_TEST_FORK"

// forkMany starts up to n sleeping processes, one after another, and
// returns how many started; they end with the sandbox.
func forkMany(n int) int {
	started := 0
	for range n {
		if exec.Command("sleep", "30").Start() != nil {
			break
		}
		started++
	}
	return started
}

// A sandbox writes no file larger than its limit (a sparse file of a
// terabyte costs no disk, but the server's git hashes it at every sync).
func TestSandboxBoundsItsFiles(t *testing.T) {
	t.Parallel()
	sb := newSandbox(t)
	dir := t.TempDir()
	argv := sb.Command(sandbox.Box{Dir: dir, Person: "sebastian"}, "/bin/sh", "-c", "truncate -s 1T big 2>&1; echo done")
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if st, err := os.Stat(filepath.Join(dir, "big")); err == nil && st.Size() > sandbox.DefaultLimits.FileSize {
		t.Errorf("the sandbox made a file of %d bytes (%s)", st.Size(), out)
	}
}
