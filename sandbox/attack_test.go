package sandbox_test

import (
	"os"
	"os/exec"
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
