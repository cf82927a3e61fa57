// Package leakcheck checks, at the end of a package's tests or of one
// test, that no goroutine outlived them. It gives goroutines on their way
// out (a reaper reading a process's last output, an HTTP handler whose
// client left) time to go before it calls one a leak: goleak's own retry
// gives up after about half a second, which a loaded machine can exceed.
// It finds leaks only; it never ends a goroutine.
package leakcheck

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// patience is how long goroutines get to finish once the tests are over.
const patience = 30 * time.Second

// Main runs the package's tests, then fails the run if a goroutine not
// excused by opts is still there after patience.
func Main(m *testing.M, opts ...goleak.Option) {
	code := m.Run()
	if code == 0 {
		if err := find(patience, opts...); err != nil {
			fmt.Fprintf(os.Stderr, "leakcheck: goroutines outlived the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// None fails tb if a goroutine not excused by opts (goleak.IgnoreCurrent,
// say) is still there after patience.
func None(tb testing.TB, opts ...goleak.Option) {
	tb.Helper()
	if err := find(patience, opts...); err != nil {
		tb.Errorf("goroutines outlived the test: %v", err)
	}
}

// find returns goleak's report of the goroutines not excused by opts that
// are still there after within, or nil as soon as there are none.
func find(within time.Duration, opts ...goleak.Option) error {
	deadline := time.Now().Add(within)
	for {
		err := goleak.Find(opts...)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
