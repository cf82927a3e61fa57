package supervisor

import "syscall"

// sysProcAttr puts the child in its own process group, so the whole group
// can be signalled, and asks the kernel to kill it if this server dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
