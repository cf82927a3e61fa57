//go:build !linux

package supervisor

import "syscall"

// sysProcAttr puts the child in its own process group.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// exitWatch cannot tell an exit before the reap here: nil, and reap waits
// for stdout to end.
func exitWatch(int) <-chan struct{} { return nil }
