package clitest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Buffer is a bytes.Buffer that a process's output (or a server's logger)
// and the test may use at once.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String is everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Start starts cmd in a process group of its own with its output in the
// returned Buffer, and kills the group when the test ends (then logging
// the output, if the test failed). exited is closed once cmd has exited.
func Start(tb testing.TB, cmd *exec.Cmd) (logs *Buffer, exited <-chan struct{}) {
	tb.Helper()
	logs = &Buffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	tb.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		if tb.Failed() {
			tb.Logf("%s's output:\n%s", filepath.Base(cmd.Path), logs)
		}
	})
	return logs, done
}

// LiveHeap is the live heap of this process after a collection, for
// tests that check what a server holds.
func LiveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// OpenFiles counts this process's descriptors open on path, for tests
// that check a file is closed.
func OpenFiles(tb testing.TB, path string) int {
	tb.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		tb.Fatal(err)
	}
	n := 0
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && target == path {
			n++
		}
	}
	return n
}

// Settling runs attempt with a settling time that doubles from 20 ms until
// it reports done or 30 s have passed, and returns its last result. It is
// for a setup with no outward sign of being complete (requests a server
// holds, say) that the try after it must come behind: each attempt, on a
// setup of its own, gives it longer.
func Settling[T any](attempt func(settle time.Duration) (result T, done bool)) T {
	start := time.Now()
	for settle := 20 * time.Millisecond; ; settle *= 2 {
		if result, done := attempt(settle); done || time.Since(start) > 30*time.Second {
			return result
		}
	}
}
