//go:build unix

package vault

import (
	"errors"
	"os/exec"
	"syscall"
)

// inOwnGroup makes cmd a process-group leader and, on cancel, kills the
// whole group: git runs helpers (ssh, credential helpers, remote-https)
// that would otherwise outlive a killed git and hold its pipes open.
func inOwnGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		if errors.Is(err, syscall.ESRCH) {
			return nil
		}
		return err
	}
}
