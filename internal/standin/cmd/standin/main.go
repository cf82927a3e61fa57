// Command standin is a fast stand-in for the claude CLI in stream-json mode,
// for load tests and benchmarks; see package standin for what it does and
// what it does not prove.
package main

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/majorhq/major/internal/standin"
)

func main() {
	// A non-blocking stdin is served by the runtime poller, so closing it
	// ends a pending read and Run can wait for its reader.
	stdin := os.Stdin
	if err := syscall.SetNonblock(0, true); err == nil {
		stdin = os.NewFile(0, "stdin")
	}
	err := standin.Run(standin.ParseArgs(os.Args[1:]), stdin, os.Stdout)
	switch {
	case errors.Is(err, standin.ErrCrash):
		fmt.Fprintln(os.Stderr, "standin: crashing as asked")
		os.Exit(3)
	case err != nil:
		fmt.Fprintln(os.Stderr, "standin:", err)
		os.Exit(1)
	}
}
