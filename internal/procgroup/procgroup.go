// Package procgroup tells whether a process group still has a live member,
// for the tests that check a CLI leaves nothing running. It reads /proc
// (Linux) and must not signal or reap anything.
//
// kill(-pgid, 0) is not enough for that: a killed member whose parent died
// with it is a zombie until init reaps it, and some inits reap only every
// few seconds. A zombie has ended; it no longer counts.
package procgroup

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// Live lists the processes of group pgid that have not ended.
func Live(pgid int) []int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var live []int
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces and parens.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := bytes.Fields(b[i+1:])
		if len(f) < 3 || string(f[0]) == "Z" || string(f[0]) == "X" {
			continue
		}
		if g, err := strconv.Atoi(string(f[2])); err == nil && g == pgid {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(path)))
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
