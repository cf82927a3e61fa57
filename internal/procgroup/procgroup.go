// Package procgroup reads processes and their groups from /proc (Linux),
// for the tests that check a CLI leaves nothing running or that find the
// CLI a terminal runs, and for the terminal, which hangs up the members of
// a sandbox's group but the sandbox itself. It must not signal or reap
// anything.
//
// kill(-pgid, 0) is not enough to tell a group is gone: a killed member
// whose parent died with it is a zombie until init reaps it, and some
// inits reap only every few seconds. A zombie has ended; it no longer
// counts.
package procgroup

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Proc is what /proc says of one process.
type Proc struct {
	PID, PPID, PGID int
	// State is the one-letter state: R, S, D, Z (zombie), X (dead), ...
	State string
}

// Ended reports whether the process has ended (a zombie or dead).
func (p Proc) Ended() bool { return p.State == "Z" || p.State == "X" }

// Read reads process pid's stat; false if it is gone.
func Read(pid int) (Proc, bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return Proc{}, false
	}
	// pid (comm) state ppid pgrp ...; comm may hold spaces and parens.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return Proc{}, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 3 {
		return Proc{}, false
	}
	ppid, _ := strconv.Atoi(string(f[1]))
	pgid, _ := strconv.Atoi(string(f[2]))
	return Proc{PID: pid, PPID: ppid, PGID: pgid, State: string(f[0])}, true
}

// Args is process pid's command line (nil if it is gone).
func Args(pid int) []string {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
}

// All lists the pids /proc shows.
func All() []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Live lists the processes of group pgid that have not ended.
func Live(pgid int) []int {
	var live []int
	for _, pid := range All() {
		if p, ok := Read(pid); ok && p.PGID == pgid && !p.Ended() {
			live = append(live, pid)
		}
	}
	return live
}

// WaitGone waits up to d for group pgid to have no live member and returns
// the ones still there then (none when it is gone).
func WaitGone(pgid int, d time.Duration) []int {
	deadline := time.Now().Add(d)
	for {
		live := Live(pgid)
		if len(live) == 0 || time.Now().After(deadline) {
			return live
		}
		time.Sleep(10 * time.Millisecond)
	}
}
