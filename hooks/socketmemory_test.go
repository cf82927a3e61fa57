package hooks_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/clitest"
	"github.com/majorhq/major/hooks"
)

// The hook socket reads each hook input whole into memory (up to 64 MiB)
// before it answers, with no time limit once the headers are in and no
// bound on how many a terminal has open. The terminal's sandbox has the
// socket and its token (HOOK_SOCKET, HOOK_TOKEN in every process's
// environment there): connections that each send 64 MiB less a byte and
// then nothing more hold all of it in the server for as long as they
// stay open. Not parallel: it reads the heap of the whole test process.
func TestHookSocketBoundsInputsInMemory(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "sebastian"), 0o755); err != nil {
		t.Fatal(err)
	}
	h := hooks.New(hooks.Config{VaultRoot: root, Logger: zerolog.Nop()})
	cmds, err := hooks.ListenCommands(hooks.CommandConfig{Socket: filepath.Join(t.TempDir(), "hooks.sock"), Handle: h.Handle, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cmds.Close()
	token, unregister := cmds.Register(newCaller("s1", "sebastian"))
	defer unregister()

	const conns, size = 4, 64 << 20
	input := []byte(`{"hook_event_name":"PreToolUse","tool_name":"Write","tool_input":{"content":"` + strings.Repeat("a", size-200) + `"}}`)
	before := clitest.LiveHeap()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		held []net.Conn
	)
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("unix", cmds.Socket())
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
			head := fmt.Sprintf("POST /hook/%s HTTP/1.1\r\nHost: major\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n", hooks.CallbackVaultGuard, token, len(input)+1)
			// All but the last byte: the server waits for it.
			if _, err := c.Write(append([]byte(head), input...)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	input = nil
	grown := int64(clitest.LiveHeap()) - int64(before)
	t.Logf("%d hook inputs of %d MiB each, never finished: the server's heap grew by %d MiB", conns, size>>20, grown>>20)
	if grown > size {
		t.Errorf("hook inputs that never finish hold %d MiB of the server's memory (%d of them)", grown>>20, conns)
	}
	for _, c := range held {
		c.Close()
	}
}
