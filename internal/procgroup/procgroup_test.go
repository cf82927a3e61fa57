package procgroup

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

func TestLiveSeesAGroupUntilItsMembersEnd(t *testing.T) {
	// A group of two: the shell and its background sleep.
	cmd := exec.Command("/bin/sh", "-c", "sleep 30 & exec sleep 31")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	deadline := time.Now().Add(5 * time.Second)
	for len(Live(pgid)) != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("live members %v, want 2", Live(pgid))
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	_ = cmd.Wait()
	// The orphaned sleep may stay a zombie for a while; it has ended.
	if live := WaitGone(pgid, 2*time.Second); len(live) != 0 {
		t.Fatalf("members still live after SIGKILL: %v", live)
	}
	if live := Live(1 << 30); len(live) != 0 {
		t.Fatalf("a group that never existed has members %v", live)
	}
}
