package supervisor

import (
	"errors"
	"syscall"

	"golang.org/x/sys/unix"
)

// sysProcAttr puts the child in its own process group, so the whole group
// can be signalled, and asks the kernel to kill it if this server dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// exitWatch returns a channel closed once child pid has exited. It does
// not reap the child (WNOWAIT): the caller's Wait does, after the channel
// is closed, so the pid cannot be reused while it is watched.
func exitWatch(pid int) <-chan struct{} {
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		var info unix.Siginfo
		for {
			err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
			if !errors.Is(err, unix.EINTR) {
				return
			}
		}
	}()
	return exited
}
