package sandbox_test

import (
	"os"
	"os/exec"
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
	const want = 1000
	script := `n=0; while [ $n -lt ` + strconv.Itoa(want) + ` ]; do sleep 30 & n=$((n+1)); done 2>/dev/null; ` +
		`ls -d /proc/[0-9]* | wc -l`
	argv := sb.Command(sandbox.Box{Dir: t.TempDir()}, "/bin/sh", "-c", script)
	out, _ := exec.Command(argv[0], argv[1:]...).Output()
	got, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("no count: %q", out)
	}
	if got >= want {
		t.Errorf("the sandbox ran %d processes at once, and would run as many as the host's pid_max lets it", got)
	}
}
