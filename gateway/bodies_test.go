package gateway_test

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/majorhq/major/clitest"
)

// A model request's body is read whole into memory before anything else
// happens (up to 32 MB), with no time limit once its headers are in and
// no bound on how many requests a token has open. A process holding a
// session token (any process in the sandbox: ANTHROPIC_AUTH_TOKEN is in
// its environment) opens connections that each send 32 MB less a byte
// and then nothing more: each holds its 32 MB in the server for as long
// as the connection stays open. A few dozen take the server, and every
// person's sessions with it, out of memory. Not parallel: it reads the
// heap of the whole test process.
func TestGatewayBoundsBodiesInMemory(t *testing.T) {
	w := newAttackWorld(t, expensive, nil)
	token := w.gw.Issue("sebastian", "chat-1")
	addr := strings.TrimPrefix(w.url, "http://")
	const conns, size = 8, 32 << 20
	before := clitest.LiveHeap()
	var wg sync.WaitGroup
	body := []byte(`{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"` + strings.Repeat("a", size-100) + `"}]}`)
	held := make([]net.Conn, 0, conns)
	var mu sync.Mutex
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
			head := fmt.Sprintf("POST /v1/messages HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", token, len(body)+1)
			// All but the last byte: the gateway waits for it.
			if _, err := c.Write(append([]byte(head), body...)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	grown := int64(clitest.LiveHeap()) - int64(before)
	t.Logf("%d connections of %d MiB each, never finished: the gateway's heap grew by %d MiB", conns, size>>20, grown>>20)
	if grown > 2*size {
		t.Errorf("requests whose bodies never finish hold %d MiB of the server's memory (%d of them)", grown>>20, conns)
	}
	for _, c := range held {
		c.Close()
	}
}
