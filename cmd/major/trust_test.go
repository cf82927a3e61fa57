package main

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// cliOf is a shell expression for the pid of the CLI the shell probe
// runs under: the shell's parent is the probe, the probe's parent the CLI.
const cliOf = `$(awk '{print $4}' /proc/$PPID/stat)`

// Whatever the sandbox writes onto the CLI's output during a turn is kept
// by the server as the session's cli events, in memory (and in the
// session's log): nothing bounds how much. Lines of a megabyte each, as
// many as the sandbox likes, grow the server's heap by as much, until
// the server, with every person's sessions, runs out of memory. Not
// parallel: it reads the heap of the whole test process.
func TestSandboxOutputNeverFillsTheServersMemory(t *testing.T) {
	s, _ := startWithShell(t)
	id := s.newSessionAs(t, "sebastian")
	s.shell(t, id, "true")
	const lines, size = 128, 1 << 20
	before := heap()
	script := `pad=$(head -c ` + fmt.Sprint(size) + ` /dev/zero | tr '\0' a); cli=` + cliOf + `; ` +
		`for i in $(seq ` + fmt.Sprint(lines) + `); do printf '{"type":"system","subtype":"note","pad":"%s"}\n' "$pad"; done > /proc/$cli/fd/1; echo WROTE`
	if got := s.shell(t, id, script); !strings.Contains(got, "WROTE") {
		t.Fatalf("could not write: %s", got)
	}
	grown := int64(heap()) - int64(before)
	t.Logf("the server's heap grew by %d MiB after %d MiB written onto the CLI's output", grown>>20, lines*size>>20)
	if grown > 32<<20 {
		t.Errorf("the server keeps what the sandbox wrote onto the CLI's output: its heap grew by %d MiB for %d MiB written", grown>>20, lines*size>>20)
	}
}

// heap is the live heap of this process, after a collection.
func heap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
