package terminal_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/majorhq/major/hooks"
	"github.com/majorhq/major/terminal"
)

// resumingChat is a chat that records which conversation its terminal
// gives back.
type resumingChat struct {
	chat
	mu      sync.Mutex
	resumed []string
}

func (c *resumingChat) CloseTerminal(id string) {
	c.mu.Lock()
	c.resumed = append(c.resumed, id)
	c.mu.Unlock()
	c.chat.CloseTerminal(id)
}

func (c *resumingChat) resumes() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.resumed...)
}

var uuidForm = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// Every process in the terminal's sandbox has the hook socket and the
// terminal's token, so the conversation id a hook input names is the
// sandbox's word. One that is not a conversation id (a path, a flag, a
// megabyte) is not taken as the conversation the app resumes: the chat
// gets its own back, not a value that breaks its next message (an
// argument too long to start the CLI with) and sits in its saved state.
// A conversation id is taken, as when the person resumes another one.
func TestTerminalTakesNoForgedConversationID(t *testing.T) {
	t.Parallel()
	const other = "0b9c1c5e-3f43-4c1a-9d3e-2f8f4b7e9a10"
	for _, tc := range []struct {
		name, id string
		taken    bool
	}{
		{name: "another conversation of the person", id: other, taken: true},
		{name: "a path", id: "../../../etc/passwd"},
		{name: "a flag", id: "--dangerously-skip-permissions"},
		{name: "a megabyte", id: strings.Repeat("f", 1<<20)},
		{name: "a uuid with a line after it", id: other + "\nx"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			input := filepath.Join(t.TempDir(), "input.json")
			body := `{"session_id":` + quote(tc.id) + `,"hook_event_name":"UserPromptSubmit"}`
			if err := os.WriteFile(input, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			// The stand-in CLI names the forged conversation in a hook
			// input, as any process in its sandbox can, and quits.
			script := `curl -s -o /dev/null --unix-socket "$HOOK_SOCKET" -H "Authorization: Bearer $HOOK_TOKEN" ` +
				`--data-binary @` + input + ` http://hooks/hook/` + hooks.CallbackTurnEnd + `; echo posted; exec sleep 600`
			w := newWorld(t, script, terminal.Config{})
			ch := &resumingChat{}
			client, err := w.Attach(context.Background(), "s1", "sebastian", ch)
			if err != nil {
				t.Fatal(err)
			}
			var screen strings.Builder
			for !strings.Contains(screen.String(), "posted") {
				select {
				case b, ok := <-client.Output():
					if !ok {
						t.Fatalf("the output ended (%v): %q", client.Err(), screen.String())
					}
					screen.Write(b)
				case <-time.After(30 * time.Second):
					t.Fatalf("the program did not post its hook input: %q", screen.String())
				}
			}
			client.End()
			eventually(t, "the terminal's end", func() bool { return ch.closes() == 1 })
			got := ch.resumes()
			if tc.taken {
				if len(got) != 1 || got[0] != tc.id {
					t.Fatalf("the chat resumes %q, want %q", got, tc.id)
				}
				return
			}
			if len(got) != 1 || !uuidForm.MatchString(got[0]) || got[0] == other {
				short := got
				for i, g := range short {
					short[i] = g[:min(len(g), 80)]
				}
				t.Fatalf("the chat resumes %q, want the terminal's own conversation", short)
			}
		})
	}
}

// quote is s as a JSON string.
func quote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}

// Ending a session's terminal (the chat was deleted or cleared) while it
// still waits for a process slot ends that wait: once the slot frees, no
// terminal starts on a conversation that is gone.
func TestEndWhileATerminalWaitsForASlot(t *testing.T) {
	t.Parallel()
	w := newWorld(t, notReading, terminal.Config{})
	release, err := w.pool.Hold(context.Background(), "petra") // the one slot
	if err != nil {
		t.Fatal(err)
	}
	ch := &chat{}
	attached := make(chan error, 1)
	go func() {
		c, err := w.Attach(context.Background(), "s1", "sebastian", ch)
		if err == nil {
			c.End()
		}
		attached <- err
	}()
	eventually(t, "the start", func() bool { return ch.opens() == 1 })
	if !w.End("s1") {
		t.Error("End found no terminal of s1, though one is starting")
	}
	release()
	select {
	case err := <-attached:
		if !errors.Is(err, terminal.ErrStopped) {
			t.Errorf("attach after its terminal was ended: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the attach is still waiting")
	}
	if n := w.launches.Load(); n != 0 {
		t.Fatalf("%d terminals started after the session's terminal was ended", n)
	}
	eventually(t, "the conversation given back", func() bool { return ch.closes() == 1 })
}
