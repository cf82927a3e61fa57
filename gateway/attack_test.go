package gateway_test

import (
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/gateway"
	"github.com/majorhq/major/scriptedmodel"
)

// What a sandboxed process does with its own token, without the CLI: it
// finds the token in its environment (ANTHROPIC_AUTH_TOKEN, inherited by
// every MCP server and shell) and talks to the gateway as it likes.

// gzipWhenAsked compresses an answer when the request accepts gzip, as
// the API's HTTP front does (net/http's own client asks for it unless the
// request names an encoding itself).
type gzipWhenAsked struct{ next http.Handler }

func (g gzipWhenAsked) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
		g.next.ServeHTTP(w, r)
		return
	}
	w.Header().Set("Content-Encoding", "gzip")
	gz := gzip.NewWriter(w)
	defer gz.Close()
	g.next.ServeHTTP(&gzipWriter{ResponseWriter: w, gz: gz}, r)
}

type gzipWriter struct {
	http.ResponseWriter
	gz *gzip.Writer
}

func (w *gzipWriter) WriteHeader(code int) {
	w.Header().Del("Content-Length")
	w.ResponseWriter.WriteHeader(code)
}

func (w *gzipWriter) Write(p []byte) (int, error) { return w.gz.Write(p) }

func (w *gzipWriter) Flush() {
	_ = w.gz.Flush()
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// attackWorld is a gateway in front of the scripted model answering with
// respond (compressing when asked), recording every request; admit, when
// set, is the gateway's Admit.
type attackWorld struct {
	gw    *gateway.Gateway
	url   string
	model *scriptedmodel.Server

	mu      sync.Mutex
	records []gateway.Request
}

func newAttackWorld(tb testing.TB, respond scriptedmodel.Responder, admit func(w *attackWorld) error) *attackWorld {
	tb.Helper()
	w := &attackWorld{model: scriptedmodel.New(respond)}
	up := httptest.NewServer(gzipWhenAsked{w.model})
	tb.Cleanup(up.Close)
	cfg := gateway.Config{Upstream: up.URL, Credential: gateway.APIKey(realKey), Logger: zerolog.Nop(),
		Record: func(r gateway.Request) {
			w.mu.Lock()
			w.records = append(w.records, r)
			w.mu.Unlock()
		}}
	if admit != nil {
		cfg.Admit = func(string, string) error { return admit(w) }
		cfg.Budgeted = func(string, string) bool { return true }
	}
	gw, err := gateway.New(cfg)
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

// spent is what the recorded requests cost.
func (w *attackWorld) spent() (usd float64, n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range w.records {
		usd += r.CostUSD
	}
	return usd, len(w.records)
}

// post sends a model request with token as a sandboxed process would,
// reads the whole answer, and returns its status.
func (w *attackWorld) post(tb testing.TB, token, body string, header map[string]string) int {
	tb.Helper()
	req, _ := http.NewRequest("POST", w.url+"/v1/messages", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	// No encoding unless header names one (net/http would ask for gzip
	// on its own).
	resp, err := plainTransport.RoundTrip(req)
	if err != nil {
		tb.Error(err)
		return 0
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

var plainTransport = &http.Transport{DisableCompression: true}

// A million input tokens of claude-sonnet-4-5 cost $3.
const millionTokens = 1_000_000

func expensive(scriptedmodel.Request) scriptedmodel.Reply {
	return scriptedmodel.Reply{Blocks: []scriptedmodel.ReplyBlock{{Text: "an expensive answer"}}, InputTokens: millionTokens}
}

// A request that accepts gzip gets the answer compressed: the meter reads
// compressed bytes, finds no usage, and the request costs nothing, so no
// budget ever fills.
func TestGatewayMetersCompressedAnswers(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{false, true} {
		name := map[bool]string{false: "json", true: "stream"}[stream]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			w := newAttackWorld(t, expensive, nil)
			token := w.gw.Issue("sebastian", "chat-1")
			body := `{"model":"claude-sonnet-4-5","max_tokens":10,"stream":` + map[bool]string{false: "false", true: "true"}[stream] +
				`,"messages":[{"role":"user","content":"hi"}]}`
			if code := w.post(t, token, body, map[string]string{"Accept-Encoding": "gzip"}); code != http.StatusOK {
				t.Fatalf("status %d", code)
			}
			w.gw.Close() // waits for the request's record
			if usd, n := w.spent(); n != 1 || usd < 3 {
				t.Errorf("%d requests recorded, costing $%.4f; want one costing $3 (a million input tokens)", n, usd)
			}
		})
	}
}

// An upstream that compresses an answer although the gateway asked for
// none: the answer is refused rather than passed on unmetered.
func TestGatewayRefusesAnswersItCannotMeter(t *testing.T) {
	t.Parallel()
	model := scriptedmodel.New(expensive)
	always := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set("Accept-Encoding", "gzip")
		gzipWhenAsked{model}.ServeHTTP(w, r)
	})
	up := httptest.NewServer(always)
	t.Cleanup(up.Close)
	records := make(chan gateway.Request, 4)
	gw, err := gateway.New(gateway.Config{Upstream: up.URL, Credential: gateway.APIKey(realKey), Logger: zerolog.Nop(),
		Record: func(r gateway.Request) { records <- r }})
	if err != nil {
		t.Fatal(err)
	}
	url, err := gw.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.Close() })
	req, _ := http.NewRequest("POST", url+"/v1/messages",
		strings.NewReader(`{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Authorization", "Bearer "+gw.Issue("sebastian", "chat-1"))
	resp, err := plainTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || resp.Header.Get("Content-Encoding") != "" ||
		!strings.Contains(string(body), "cannot meter") || resp.Header.Get("x-should-retry") != "false" {
		t.Fatalf("status %d, encoding %q, x-should-retry %q: %s", resp.StatusCode, resp.Header.Get("Content-Encoding"),
			resp.Header.Get("x-should-retry"), body)
	}
	gw.Close()
	if r := <-records; r.Status != http.StatusOK || r.Complete {
		t.Errorf("recorded status %d complete %v, want the upstream's 200, not complete", r.Status, r.Complete)
	}
}

// An answer that is not streamed and is longer than the meter keeps (8
// MB) goes through unmetered: its input tokens cost nothing. The API's
// server tools (a fetched PDF, search results) make answers that long.
func TestGatewayMetersLongAnswers(t *testing.T) {
	t.Parallel()
	w := newAttackWorld(t, func(scriptedmodel.Request) scriptedmodel.Reply {
		return scriptedmodel.Reply{Blocks: []scriptedmodel.ReplyBlock{{Text: strings.Repeat("x", 9<<20)}}, InputTokens: millionTokens}
	}, nil)
	token := w.gw.Issue("sebastian", "chat-1")
	body := `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`
	if code := w.post(t, token, body, nil); code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	w.gw.Close()
	if usd, n := w.spent(); n != 1 || usd < 3 {
		t.Errorf("%d requests recorded, costing $%.4f; want one costing at least $3", n, usd)
	}
}

// The budget is asked before each request, but a request is counted only
// once it has ended: requests sent at once, while none has ended, are all
// admitted, however far they take the spend past the budget.
func TestGatewayHoldsTheBudgetAgainstRequestsAtOnce(t *testing.T) {
	t.Parallel()
	const budget = 1.0 // one request ($3) already goes past it
	w := newAttackWorld(t, func(scriptedmodel.Request) scriptedmodel.Reply {
		// A slow answer, as a long one from the real model is.
		return scriptedmodel.Reply{Blocks: []scriptedmodel.ReplyBlock{{Text: strings.Repeat("tick ", 10)}}, ChunkSize: 5,
			Delay: 100 * time.Millisecond, InputTokens: millionTokens}
	}, func(w *attackWorld) error {
		if usd, _ := w.spent(); usd >= budget {
			return &budgetError{}
		}
		return nil
	})
	token := w.gw.Issue("sebastian", "chat-1")
	body := `{"model":"claude-sonnet-4-5","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.post(t, token, body, nil)
		}()
	}
	wg.Wait()
	w.gw.Close()
	// At most the one request that crossed the budget may be paid for.
	if usd, n := w.spent(); usd > budget+3 {
		t.Errorf("%d requests went upstream, $%.2f spent against a budget of $%.2f", n, usd, budget)
	}
}

type budgetError struct{}

func (*budgetError) Error() string { return "the budget is spent" }

// A body naming the model twice is priced by the first name, while a
// JSON reader that keeps the last one (Go's, the scripted model's; the
// API's may too) serves the second: an expensive model at a cheap one's
// price.
func TestGatewayPricesTheModelServed(t *testing.T) {
	t.Parallel()
	w := newAttackWorld(t, expensive, nil)
	token := w.gw.Issue("sebastian", "chat-1")
	body := `{"model":"claude-haiku-4-5","model":"claude-opus-4-1","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`
	code := w.post(t, token, body, nil)
	w.gw.Close()
	reqs := w.model.Requests()
	if code != http.StatusOK || len(reqs) != 1 {
		// Refusing such a body is a fix too.
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.records) != 1 || w.records[0].Model != reqs[0].Model {
		t.Errorf("the upstream served %q, the gateway priced %q ($%.2f)", reqs[0].Model, w.records[0].Model, w.records[0].CostUSD)
	}
}
