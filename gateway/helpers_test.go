package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/clitest"
	"github.com/majorhq/major/gateway"
	"github.com/majorhq/major/scriptedmodel"
	"github.com/majorhq/major/supervisor"
)

// realKey is the server's credential in these tests: the scripted model
// accepts nothing else.
const realKey = "sk-ant-the-servers-own-key"

// seenRequest is a request as the upstream received it.
type seenRequest struct {
	Method, Path, Query string
	Header              http.Header
}

// upstreamLog records what reaches the upstream, in front of the
// scripted model.
type upstreamLog struct {
	next http.Handler
	mu   sync.Mutex
	reqs []seenRequest
}

func (u *upstreamLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	u.reqs = append(u.reqs, seenRequest{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Header: r.Header.Clone()})
	u.mu.Unlock()
	u.next.ServeHTTP(w, r)
}

func (u *upstreamLog) all() []seenRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seenRequest(nil), u.reqs...)
}

// messages counts the model requests that reached the upstream.
func (u *upstreamLog) messages() int {
	n := 0
	for _, r := range u.all() {
		if r.Method == http.MethodPost && r.Path == "/v1/messages" {
			n++
		}
	}
	return n
}

// world is one test's gateway between the real CLI and a scripted model
// that requires the server's key.
type world struct {
	env      *clitest.Env
	upstream *upstreamLog
	gw       *gateway.Gateway
	url      string

	mu       sync.Mutex
	records  []gateway.Request
	recorded chan gateway.Request
}

// newWorld starts the scripted model (respond, nil: Script) behind the
// gateway; configure may change the gateway's config. When the test ends
// the gateway is closed and every model request that reached the upstream
// must have been recorded exactly once.
func newWorld(tb testing.TB, respond scriptedmodel.Responder, configure func(*gateway.Config)) *world {
	tb.Helper()
	w := &world{env: clitest.New(tb, respond), recorded: make(chan gateway.Request, 256)}
	w.env.Model.RequireKey(realKey)
	w.upstream = &upstreamLog{next: w.env.Model}
	up := httptest.NewServer(w.upstream)
	tb.Cleanup(up.Close)
	cfg := gateway.Config{Upstream: up.URL, Credential: gateway.APIKey(realKey), Record: w.record, Logger: zerolog.Nop()}
	if configure != nil {
		configure(&cfg)
	}
	gw, err := gateway.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	w.gw = gw
	if w.url, err = gw.Listen("127.0.0.1:0"); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := gw.Close(); err != nil {
			tb.Error(err)
		}
		if n, m := len(w.all()), w.upstream.messages(); n != m {
			tb.Errorf("%d model requests reached the upstream, %d were recorded", m, n)
		}
	})
	return w
}

func (w *world) record(r gateway.Request) {
	w.mu.Lock()
	w.records = append(w.records, r)
	w.mu.Unlock()
	w.recorded <- r
}

func (w *world) all() []gateway.Request {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]gateway.Request(nil), w.records...)
}

// next waits for the next recorded request.
func (w *world) next(tb testing.TB) gateway.Request {
	tb.Helper()
	t := time.NewTimer(60 * time.Second)
	defer t.Stop()
	select {
	case r := <-w.recorded:
		return r
	case <-t.C:
		tb.Fatal("no model request was recorded within 60s")
		return gateway.Request{}
	}
}

// drain takes every request recorded so far off the queue.
func (w *world) drain() []gateway.Request {
	var out []gateway.Request
	for {
		select {
		case r := <-w.recorded:
			out = append(out, r)
		default:
			return out
		}
	}
}

// settle waits until every model request that reached the upstream has
// been recorded (the CLI may end its turn at message_stop, before the
// gateway has seen the end of the body), and returns the records not yet
// taken.
func (w *world) settle(tb testing.TB) []gateway.Request {
	tb.Helper()
	want := w.upstream.messages()
	var got []gateway.Request
	for len(w.all()) < want {
		got = append(got, w.next(tb))
	}
	return append(got, w.drain()...)
}

// cliEnv is a CLI's environment behind the gateway: the gateway's URL
// and a session token, and no other credential.
func (w *world) cliEnv(token string, extra ...string) []string {
	var env []string
	for _, kv := range w.env.ChildEnv() {
		if k, _, _ := strings.Cut(kv, "="); k == "ANTHROPIC_BASE_URL" || k == "ANTHROPIC_API_KEY" ||
			k == "ANTHROPIC_AUTH_TOKEN" || k == "CLAUDE_CODE_OAUTH_TOKEN" {
			continue
		}
		env = append(env, kv)
	}
	return append(append(env, "ANTHROPIC_BASE_URL="+w.url, "ANTHROPIC_API_KEY="+token), extra...)
}

// session starts a CLI session of person through the gateway, with a
// token of its own.
func (w *world) session(tb testing.TB, person, id string, extraEnv ...string) (*supervisor.CLI, *clitest.Recorder, string) {
	tb.Helper()
	token := w.gw.Issue(person, id)
	rec := clitest.NewRecorder()
	s := supervisor.NewCLI(supervisor.CLIConfig{
		ID: id, Person: person, Dir: w.env.Vault(person),
		Spec: supervisor.Spec{
			Binary: w.env.Binary,
			// Few retries, so a failure the CLI retries shows as one.
			Env:   w.cliEnv(token, append([]string{"CLAUDE_CODE_MAX_RETRIES=2", "API_TIMEOUT_MS=30000"}, extraEnv...)...),
			Tools: []string{"Read"},
		},
		Sink:   rec,
		Logger: zerolog.Nop(),
	})
	tb.Cleanup(func() { _ = s.Close() })
	return s, rec, token
}

// result is the part of the CLI's result message these tests read.
type result struct {
	Type           string   `json:"type"`
	IsError        bool     `json:"is_error"`
	Result         string   `json:"result"`
	TotalCostUSD   *float64 `json:"total_cost_usd"`
	APIErrorStatus *int     `json:"api_error_status"`
	APIErrorType   string   `json:"api_error_type"`
}

// print runs one `claude -p` turn through the gateway with token and
// returns its result.
func (w *world) print(tb testing.TB, token, model, prompt string, extraEnv ...string) result {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, w.env.Binary, "-p", prompt, "--model", model, "--output-format", "stream-json",
		"--verbose", "--setting-sources", "", "--strict-mcp-config", "--tools", "")
	cmd.Dir = w.env.Vault("sebastian")
	cmd.Env = w.cliEnv(token, extraEnv...)
	out, err := cmd.Output()
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var r result
		if json.Unmarshal(sc.Bytes(), &r) == nil && r.Type == "result" {
			return r
		}
	}
	tb.Fatalf("claude -p --model %s %q: no result (%v): %s", model, prompt, err, out)
	return result{}
}
