package gateway

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// turnsWorld is a gateway in front of an upstream whose model answers
// wait until release is closed (or the test's guard time passes).
type turnsWorld struct {
	gw      *Gateway
	url     string
	arrived chan struct{} // one value per model request that reached the upstream
	release chan struct{}
	sent    atomic.Int64
	records atomic.Int64
}

func newTurnsWorld(tb testing.TB, budgeted func(person, session string) bool) *turnsWorld {
	tb.Helper()
	w := &turnsWorld{arrived: make(chan struct{}, 16), release: make(chan struct{})}
	up := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w.sent.Add(1)
		w.arrived <- struct{}{}
		guard := time.NewTimer(60 * time.Second)
		defer guard.Stop()
		select {
		case <-w.release:
		case <-guard.C:
		case <-r.Context().Done():
		}
		rw.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(rw, `{"type":"message","model":"claude-haiku-4-5","usage":{"input_tokens":10,"output_tokens":1}}`)
	}))
	tb.Cleanup(up.Close)
	gw, err := New(Config{Upstream: up.URL, Credential: APIKey("sk-ant-key"), Logger: zerolog.Nop(), Budgeted: budgeted,
		Record: func(Request) { w.records.Add(1) }})
	if err != nil {
		tb.Fatal(err)
	}
	w.gw = gw
	if w.url, err = gw.Listen("127.0.0.1:0"); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = gw.Close() })
	return w
}

// post sends a model request with token and returns its status (0 when
// ctx ended first).
func (w *turnsWorld) post(ctx context.Context, token string) int {
	req, _ := http.NewRequestWithContext(ctx, "POST", w.url+"/v1/messages", strings.NewReader(`{"model":"claude-haiku-4-5","max_tokens":1}`))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// waitArrived waits for n model requests to reach the upstream.
func (w *turnsWorld) waitArrived(tb testing.TB, n int) {
	tb.Helper()
	guard := time.NewTimer(60 * time.Second)
	defer guard.Stop()
	for range n {
		select {
		case <-w.arrived:
		case <-guard.C:
			tb.Fatalf("fewer than %d model requests reached the upstream together", n)
		}
	}
}

// waiting is how many model requests of gr's session are in flight or
// waiting for their turn.
func (w *turnsWorld) waiting(gr grant) int {
	w.gw.mu.Lock()
	defer w.gw.mu.Unlock()
	if t := w.gw.turns[gr]; t != nil {
		return t.waiting
	}
	return 0
}

// Turns are taken only where a budget applies, and only within one
// session: elsewhere two requests reach the upstream together.
func TestGatewayTakesTurnsOnlyWhereABudgetApplies(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		budgeted func(person, session string) bool
		sessions [2]string
	}{
		{"no budget", nil, [2]string{"chat-1", "chat-1"}},
		{"no budget for this person", func(p, _ string) bool { return p != "sebastian" }, [2]string{"chat-1", "chat-1"}},
		{"a budget, two chats", func(string, string) bool { return true }, [2]string{"chat-1", "chat-2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newTurnsWorld(t, tc.budgeted)
			var wg sync.WaitGroup
			var codes [2]int
			for i, s := range tc.sessions {
				token := w.gw.Issue("sebastian", s)
				wg.Add(1)
				go func() {
					defer wg.Done()
					codes[i] = w.post(context.Background(), token)
				}()
			}
			w.waitArrived(t, 2)
			close(w.release)
			wg.Wait()
			if codes != [2]int{200, 200} {
				t.Fatalf("statuses %v", codes)
			}
		})
	}
}

// A request waiting for its session's turn whose CLI gives up never goes
// upstream and holds nothing: the next request goes once the one in
// flight ended, and the session's turn is forgotten when none is left.
func TestGatewayWaitingRequestGivesUp(t *testing.T) {
	t.Parallel()
	w := newTurnsWorld(t, func(string, string) bool { return true })
	gr := grant{person: "sebastian", session: "chat-1"}
	token := w.gw.Issue(gr.person, gr.session)
	first := make(chan int, 1)
	go func() { first <- w.post(context.Background(), token) }()
	w.waitArrived(t, 1)

	ctx, cancel := context.WithCancel(context.Background())
	second := make(chan int, 1)
	go func() { second <- w.post(ctx, token) }()
	waitUntil(t, func() bool { return w.waiting(gr) == 2 })
	cancel()
	if code := <-second; code != 0 {
		t.Fatalf("the request given up answered %d", code)
	}
	waitUntil(t, func() bool { return w.waiting(gr) == 1 })

	close(w.release)
	if code := <-first; code != 200 {
		t.Fatalf("the request in flight answered %d", code)
	}
	if code := w.post(context.Background(), token); code != 200 {
		t.Fatalf("the next request answered %d", code)
	}
	w.gw.Close()
	if n, r := w.sent.Load(), w.records.Load(); n != 2 || r != 2 {
		t.Fatalf("%d requests went upstream, %d recorded; want the two not given up", n, r)
	}
	if len(w.gw.turns) != 0 {
		t.Fatalf("%d turns left", len(w.gw.turns))
	}
}

// waitUntil polls cond until it holds (a minute at most).
func waitUntil(tb testing.TB, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatal("condition not met within a minute")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
