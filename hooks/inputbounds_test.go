package hooks_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/clitest"
	"github.com/majorhq/major/hooks"
)

// boundedCommands serves hook commands with inputTimeout for a terminal
// of sebastian's, whose token it returns.
func boundedCommands(tb testing.TB, inputTimeout time.Duration) (*hooks.Commands, string) {
	tb.Helper()
	root := tb.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "sebastian"), 0o755); err != nil {
		tb.Fatal(err)
	}
	h := hooks.New(hooks.Config{VaultRoot: root, Logger: zerolog.Nop()})
	cmds, err := hooks.ListenCommands(hooks.CommandConfig{Socket: filepath.Join(tb.TempDir(), "hooks.sock"), Handle: h.Handle,
		InputTimeout: inputTimeout, Logger: zerolog.Nop()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cmds.Close() })
	token, unregister := cmds.Register(newCaller("s1", "sebastian"))
	tb.Cleanup(unregister)
	return cmds, token
}

// sendInput connects to the socket and sends a vault guard input with
// token whose headers announce length bytes, and only the first sent of
// them; the connection closes at the test's end.
func sendInput(tb testing.TB, cmds *hooks.Commands, token string, length, sent int) net.Conn {
	tb.Helper()
	c, err := net.Dial("unix", cmds.Socket())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	head := fmt.Sprintf("POST /hook/%s HTTP/1.1\r\nHost: major\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n", hooks.CallbackVaultGuard, token, length)
	if _, err := io.WriteString(c, head+strings.Repeat(" ", sent)); err != nil {
		tb.Fatal(err)
	}
	return c
}

// statusOn reads the answer's status on c, within a bound that only keeps
// a broken server from hanging the test.
func statusOn(tb testing.TB, c net.Conn) int {
	tb.Helper()
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		tb.Fatalf("no answer: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// What a terminal's hook inputs may make the server hold: each arrives
// within the input timeout and is at most 16 MiB, a terminal has at most 8
// in at once and 32 MiB of them held. Past each bound the input is
// refused and the others go on.
func TestHookSocketBoundsWhatATerminalHolds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// held are the inputs (announced length, bytes sent) that stay
		// unfinished; then an input of size bytes, sent whole, gets want.
		held []int
		size int
		want int
	}{
		{name: "an input over 16 MiB is refused", size: 16<<20 + 1, want: http.StatusRequestEntityTooLarge},
		{name: "a 9th input at once is refused", held: []int{100, 100, 100, 100, 100, 100, 100, 100}, size: 100, want: http.StatusTooManyRequests},
		{name: "inputs past 32 MiB at once are refused", held: []int{16 << 20, 16 << 20}, size: 100, want: http.StatusServiceUnavailable},
		{name: "an input within the bounds is answered", held: []int{16 << 20}, size: 100, want: http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// The held inputs must be in before the try: a try that came
			// first would be taken in, and a held one refused in its
			// place.
			got := clitest.Settling(func(settle time.Duration) (int, bool) {
				cmds, token := boundedCommands(t, time.Minute)
				for _, n := range tt.held {
					sendInput(t, cmds, token, n, 1)
				}
				time.Sleep(settle)
				got := statusOn(t, sendInput(t, cmds, token, tt.size, tt.size))
				return got, got == tt.want
			})
			if got != tt.want {
				t.Errorf("status %d, want %d", got, tt.want)
			}
		})
	}
	t.Run("an input that stops arriving is answered 408 and gives its bytes back", func(t *testing.T) {
		t.Parallel()
		cmds, token := boundedCommands(t, 200*time.Millisecond)
		// Each announces what a terminal's inputs may hold: taken in (and
		// timed out) only if the ones before gave their bytes back.
		for i := range 3 {
			if got := statusOn(t, sendInput(t, cmds, token, 16<<20, 10)); got != http.StatusRequestTimeout {
				t.Fatalf("input %d: status %d, want 408", i+1, got)
			}
		}
	})
}
