package gateway_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/clitest"
	"github.com/majorhq/major/gateway"
	"github.com/majorhq/major/scriptedmodel"
)

// boundedGateway is a gateway in front of the scripted model, on its own
// listener, with bodyTimeout; it returns the gateway and its address.
func boundedGateway(tb testing.TB, bodyTimeout time.Duration) (*gateway.Gateway, string) {
	tb.Helper()
	up := httptest.NewServer(scriptedmodel.New(expensive))
	tb.Cleanup(up.Close)
	gw, err := gateway.New(gateway.Config{Upstream: up.URL, Credential: gateway.APIKey(realKey), Logger: zerolog.Nop(),
		BodyTimeout: bodyTimeout})
	if err != nil {
		tb.Fatal(err)
	}
	url, err := gw.Listen("127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = gw.Close() })
	return gw, strings.TrimPrefix(url, "http://")
}

// modelBody is a model request's body of about size bytes.
func modelBody(size int) string {
	return `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"` + strings.Repeat("a", max(size-100, 1)) + `"}]}`
}

// unfinished opens a connection to addr and sends a model request with
// token whose headers announce length bytes of body, and only the first
// sent of them; the connection closes at the test's end.
func unfinished(tb testing.TB, addr, token string, length, sent int) net.Conn {
	tb.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	head := fmt.Sprintf("POST /v1/messages HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", token, length)
	if _, err := io.WriteString(c, head+strings.Repeat("a", sent)); err != nil {
		tb.Fatal(err)
	}
	return c
}

// answer reads the answer on c, within a bound that only keeps a broken
// gateway from hanging the test.
func answer(tb testing.TB, c net.Conn) *http.Response {
	tb.Helper()
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		tb.Fatalf("no answer: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// post sends a model request of body with token and returns its answer.
func post(tb testing.TB, addr, token, body string) *http.Response {
	tb.Helper()
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/messages", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := plainTransport.RoundTrip(req)
	if err != nil {
		tb.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// afterHeld sets up a gateway holding unfinished requests (hold) and sends
// the request try returns once they are in, returning its answer as soon
// as it has status want. The held requests must be in first: a try that
// came before one would be taken in, and the held one refused in its
// place.
func afterHeld(tb testing.TB, hold func() (try func() net.Conn), want int) *http.Response {
	tb.Helper()
	return clitest.Settling(func(settle time.Duration) (*http.Response, bool) {
		try := hold()
		time.Sleep(settle)
		resp := answer(tb, try())
		return resp, resp.StatusCode == want
	})
}

// What a session's token may make the gateway hold: its requests'
// bodies arrive within the body timeout, it has at most 16 requests in
// the gateway at once, and a person's bodies held at once are at most
// the API's largest (32 MiB). Past each bound the request is refused,
// with a retry where one may pass later, and the others go on.
func TestGatewayBoundsWhatATokenHolds(t *testing.T) {
	t.Parallel()
	t.Run("a body that stops arriving is answered 408 at the body timeout", func(t *testing.T) {
		t.Parallel()
		gw, addr := boundedGateway(t, 200*time.Millisecond)
		c := unfinished(t, addr, gw.Issue("sebastian", "chat-1"), 1000, 10)
		if resp := answer(t, c); resp.StatusCode != http.StatusRequestTimeout {
			t.Errorf("status %d, want 408", resp.StatusCode)
		}
	})
	t.Run("a token's 17th request at once is answered 429, to retry", func(t *testing.T) {
		t.Parallel()
		var gw *gateway.Gateway
		var addr string
		resp := afterHeld(t, func() func() net.Conn {
			gw, addr = boundedGateway(t, time.Minute)
			token := gw.Issue("sebastian", "chat-1")
			for range 16 {
				unfinished(t, addr, token, 1000, 10)
			}
			return func() net.Conn { return unfinished(t, addr, token, 1000, 1000) }
		}, http.StatusTooManyRequests)
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("x-should-retry") != "true" {
			t.Fatalf("status %d, x-should-retry %q; want 429 with a retry", resp.StatusCode, resp.Header.Get("x-should-retry"))
		}
		if resp := post(t, addr, gw.Issue("sebastian", "chat-2"), modelBody(100)); resp.StatusCode != http.StatusOK {
			t.Errorf("another session's request: status %d", resp.StatusCode)
		}
	})
	t.Run("a person's bodies past 32 MiB are refused with 503, to retry", func(t *testing.T) {
		t.Parallel()
		var gw *gateway.Gateway
		var addr string
		// Read and thrown away once refused: its client reads the answer.
		resp := afterHeld(t, func() func() net.Conn {
			gw, addr = boundedGateway(t, time.Minute)
			unfinished(t, addr, gw.Issue("sebastian", "chat-1"), 24<<20, 10)
			token := gw.Issue("sebastian", "chat-2")
			return func() net.Conn { return unfinished(t, addr, token, 9<<20, 9<<20) }
		}, http.StatusServiceUnavailable)
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("x-should-retry") != "true" {
			t.Fatalf("status %d, x-should-retry %q; want 503 with a retry", resp.StatusCode, resp.Header.Get("x-should-retry"))
		}
		if resp := post(t, addr, gw.Issue("petra", "chat-3"), modelBody(9<<20)); resp.StatusCode != http.StatusOK {
			t.Errorf("another person's request: status %d", resp.StatusCode)
		}
	})
	t.Run("what a request held is given back when it ends", func(t *testing.T) {
		t.Parallel()
		gw, addr := boundedGateway(t, 200*time.Millisecond)
		token := gw.Issue("sebastian", "chat-1")
		// Each announces the most a person's bodies may hold: it is
		// taken in (and times out: 408) only if the one before gave its
		// bytes back, else refused (503).
		for i := range 3 {
			if resp := answer(t, unfinished(t, addr, token, 32<<20, 10)); resp.StatusCode != http.StatusRequestTimeout {
				t.Fatalf("request %d: status %d, want 408", i+1, resp.StatusCode)
			}
		}
	})
}
