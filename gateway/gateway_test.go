package gateway_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/gateway"
	"github.com/majorhq/major/scriptedmodel"
)

// The real CLI runs its turns through the gateway with a session token:
// text streams back, the upstream sees only the server's key (never the
// token, in any header), and each model request is recorded once, for
// the session, at the cost the CLI itself reports for the turn.
func TestCLITurnsThroughGateway(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil, nil)
	s, rec, token := w.session(t, "sebastian", "chat-1")
	for _, tc := range []struct {
		name, message, text string
	}{
		{"say", "[[say hello through the gateway]]", "hello through the gateway"},
		{"cost", "[[cost 123456]]", "an expensive answer"},
		{"cache and web search", `[[usage {"input_tokens":2000,"cache_creation_input_tokens":30000,"cache_read_input_tokens":400000,"output_tokens":700,"server_tool_use":{"web_search_requests":3}}]]`, "an answer with usage"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := s.Send(context.Background(), tc.message); err != nil {
				t.Fatal(err)
			}
			ev := rec.WaitEnd(t, 90*time.Second)
			if ev.Err != nil || rec.Text() != tc.text {
				t.Fatalf("turn ended with %v, text %q", ev.Err, rec.Text())
			}
			if ev.Usage == nil {
				t.Fatal("the CLI reported no usage")
			}
			var cost float64
			for _, r := range w.settle(t) {
				if r.Person != "sebastian" || r.Session != "chat-1" || r.Status != 200 || !r.Complete || r.Model == "" {
					t.Errorf("recorded %+v", r)
				}
				cost += r.CostUSD
			}
			if math.Abs(cost-ev.Usage.CostUSD) > 1e-9 || cost == 0 {
				t.Fatalf("the gateway counted %v USD, the CLI %v USD", cost, ev.Usage.CostUSD)
			}
		})
	}
	reqs := w.upstream.all()
	if len(reqs) == 0 {
		t.Fatal("nothing reached the upstream")
	}
	for _, r := range reqs {
		if got := r.Header.Get("x-api-key"); got != realKey {
			t.Errorf("%s %s reached the upstream with x-api-key %q", r.Method, r.Path, got)
		}
		for name, values := range r.Header {
			for _, v := range values {
				if strings.Contains(v, token) {
					t.Errorf("the session token reached the upstream in %s", name)
				}
			}
		}
	}
}

// count_tokens and the model list pass through with their query strings;
// every other path of the API, and the gateway's own root, do not.
func TestForwardedPaths(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil, nil)
	token := w.gw.Issue("petra", "chat-2")
	for _, tc := range []struct {
		method, path string
		status       int
		forwarded    bool
	}{
		{"POST", "/v1/messages/count_tokens?beta=true", 200, true},
		{"GET", "/v1/models?limit=5", 200, true},
		{"GET", "/v1/models/claude-sonnet-4-5", 404, true}, // the scripted model has no such route
		{"POST", "/v1/messages/batches", 404, false},
		{"GET", "/v1/files", 404, false},
		{"GET", "/v1/organizations/api_keys", 404, false},
		{"GET", "/v1/models/a/b", 404, false},
		{"GET", "/v1/models/..%2F..%2Fv1%2Ffiles", 404, false},
		{"GET", "/", 404, false},
		{"DELETE", "/v1/messages", 404, false},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			before := len(w.upstream.all())
			resp := do(t, tc.method, w.url+tc.path, "x-api-key", token, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
			if resp.status != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.status, tc.status, resp.body)
			}
			reqs := w.upstream.all()
			if forwarded := len(reqs) > before; forwarded != tc.forwarded {
				t.Fatalf("forwarded: %v, want %v", forwarded, tc.forwarded)
			}
			if tc.forwarded {
				last := reqs[len(reqs)-1]
				_, query, _ := strings.Cut(tc.path, "?")
				if last.Query != query || last.Header.Get("x-api-key") != realKey {
					t.Fatalf("upstream got query %q, key %q", last.Query, last.Header.Get("x-api-key"))
				}
			} else if !strings.Contains(resp.body, `"type":"not_found_error"`) {
				t.Fatalf("body %s", resp.body)
			}
		})
	}
}

type response struct {
	status int
	body   string
	header http.Header
}

// do sends one request to the gateway with a token header.
func do(tb testing.TB, method, url, header, value, body string) response {
	tb.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if header != "" {
		req.Header.Set(header, value)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, body: string(b), header: resp.Header}
}

// A token the gateway did not issue, one revoked, or none at all gets 401
// in the API's format and nothing reaches the upstream; a token works as
// x-api-key or as a bearer token, and Bind moves its requests to another
// session.
func TestTokens(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil, nil)
	revoked := w.gw.Issue("sebastian", "old")
	w.gw.Revoke(revoked)
	warm := w.gw.Issue("petra", "")
	const message = `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"[[say hi]]"}]}`
	for _, tc := range []struct {
		name, header, value string
	}{
		{"none", "", ""},
		{"unknown", "x-api-key", "major-session-not-one-of-ours"},
		{"the real key", "x-api-key", realKey},
		{"revoked", "x-api-key", revoked},
		{"revoked as bearer", "Authorization", "Bearer " + revoked},
		{"a prefix of a good one", "x-api-key", warm[:len(warm)-1]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := do(t, "POST", w.url+"/v1/messages", tc.header, tc.value, message)
			if resp.status != 401 || !strings.Contains(resp.body, `"type":"authentication_error"`) || !strings.Contains(resp.body, `"type":"error"`) {
				t.Fatalf("%d %s", resp.status, resp.body)
			}
		})
	}
	if n := len(w.upstream.all()); n != 0 {
		t.Fatalf("%d refused requests reached the upstream", n)
	}

	if resp := do(t, "POST", w.url+"/v1/messages", "Authorization", "Bearer "+warm, message); resp.status != 200 {
		t.Fatalf("bearer token: %d %s", resp.status, resp.body)
	}
	if r := w.next(t); r.Person != "petra" || r.Session != "" {
		t.Fatalf("recorded %+v", r)
	}
	w.gw.Bind(warm, "chat-3")
	if resp := do(t, "POST", w.url+"/v1/messages", "x-api-key", warm, message); resp.status != 200 {
		t.Fatalf("bound token: %d %s", resp.status, resp.body)
	}
	if r := w.next(t); r.Person != "petra" || r.Session != "chat-3" || r.Model != "claude-sonnet-4-5" || !r.Complete {
		t.Fatalf("recorded %+v", r)
	}
	w.gw.Revoke(warm)
	if resp := do(t, "POST", w.url+"/v1/messages", "x-api-key", warm, message); resp.status != 401 {
		t.Fatalf("after Revoke: %d", resp.status)
	}
	if n := w.upstream.messages(); n != 2 {
		t.Fatalf("%d requests reached the upstream, want 2", n)
	}
}

// Each kind of credential reaches the upstream as the API wants it, on the
// real CLI's requests: an API key as x-api-key, a token as a bearer, an
// OAuth token with its beta flag added to the CLI's own.
func TestCredentialHeaders(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		credential gateway.Credential
		header     string
		want       string
		oauth      bool
	}{
		{"api key", gateway.APIKey(realKey), "x-api-key", realKey, false},
		{"auth token", gateway.AuthToken(realKey), "Authorization", "Bearer " + realKey, false},
		{"oauth token", gateway.OAuthToken(realKey), "Authorization", "Bearer " + realKey, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, nil, func(c *gateway.Config) { c.Credential = tc.credential })
			token := w.gw.Issue("sebastian", "chat-"+tc.name)
			if r := w.print(t, token, "claude-sonnet-4-5", "[[say credential ok]]"); r.IsError || r.Result != "credential ok" {
				t.Fatalf("result %+v", r)
			}
			reqs := w.upstream.all()
			if len(reqs) == 0 {
				t.Fatal("nothing reached the upstream")
			}
			for _, r := range reqs {
				if got := r.Header.Get(tc.header); got != tc.want {
					t.Fatalf("%s: %q", tc.header, got)
				}
				other := map[string]string{"x-api-key": "Authorization", "Authorization": "x-api-key"}[tc.header]
				if got := r.Header.Get(other); got != "" {
					t.Fatalf("%s also sent: %q", other, got)
				}
				betas := strings.Split(strings.Join(r.Header.Values("anthropic-beta"), ","), ",")
				oauth := 0
				for _, b := range betas {
					if b == "oauth-2025-04-20" {
						oauth++
					}
				}
				if r.Path == "/v1/messages" && !strings.Contains(strings.Join(betas, ","), "claude-code-20250219") {
					t.Fatalf("the CLI's own beta flags were lost: %v", betas)
				}
				if (oauth == 1) != tc.oauth || oauth > 1 {
					t.Fatalf("anthropic-beta %v", betas)
				}
			}
		})
	}
}

// A budget spent: the next model request is refused before it goes
// upstream. The real CLI does not retry it (one refusal per turn): it ends
// the turn with an error result that carries the refusal's text, and the
// same process runs the next turn once the budget allows it.
func TestAdmitRefusal(t *testing.T) {
	t.Parallel()
	var (
		mu      sync.Mutex
		refusal error
		refused []string
	)
	w := newWorld(t, nil, func(c *gateway.Config) {
		c.Admit = func(person, session string) error {
			mu.Lock()
			defer mu.Unlock()
			return refusal
		}
		c.Refused = func(person, session string, err error) {
			mu.Lock()
			defer mu.Unlock()
			refused = append(refused, person+"/"+session+": "+err.Error())
		}
	})
	s, rec, _ := w.session(t, "sebastian", "chat-4")
	if text := rec.Turn(t, s, "[[say before the budget ran out]]"); text != "before the budget ran out" {
		t.Fatalf("text %q", text)
	}
	before := w.upstream.messages()

	mu.Lock()
	refusal = errors.New("the day budget of sebastian (5.00 USD) is spent")
	mu.Unlock()
	if err := s.Send(context.Background(), "[[say this must not run]]"); err != nil {
		t.Fatal(err)
	}
	ev := rec.WaitEnd(t, 90*time.Second)
	if ev.Msg == nil || !ev.Msg.IsError || ev.Msg.APIErrorStatus == nil || *ev.Msg.APIErrorStatus != 402 ||
		ev.Msg.APIErrorType != "billing_error" || !strings.Contains(ev.Msg.Result, "the day budget of sebastian (5.00 USD) is spent") {
		if ev.Msg == nil {
			t.Fatalf("the refused turn ended with err=%v and no result", ev.Err)
		}
		status := 0
		if ev.Msg.APIErrorStatus != nil {
			status = *ev.Msg.APIErrorStatus
		}
		t.Fatalf("the refused turn ended with err=%v is_error=%v status=%d type=%q result %q",
			ev.Err, ev.Msg.IsError, status, ev.Msg.APIErrorType, ev.Msg.Result)
	}
	if n := w.upstream.messages(); n != before {
		t.Fatalf("%d model requests reached the upstream after the refusal", n-before)
	}
	mu.Lock()
	got := append([]string(nil), refused...)
	refusal = nil
	mu.Unlock()
	if len(got) != 1 || got[0] != "sebastian/chat-4: the day budget of sebastian (5.00 USD) is spent" {
		t.Fatalf("refusals %q (the CLI retried, or Refused was not told)", got)
	}
	if text := rec.Turn(t, s, "[[say budget raised]]"); text != "budget raised" {
		t.Fatalf("after the refusal: text %q", text)
	}
}

// An answer cut off half way is recorded once with what was seen: the
// input tokens of message_start, the output of the last usage seen; the
// CLI sees the stream cut, not a clean end.
func TestRecordStreamCut(t *testing.T) {
	t.Parallel()
	w := newWorld(t, func(scriptedmodel.Request) scriptedmodel.Reply {
		return scriptedmodel.Reply{Blocks: []scriptedmodel.ReplyBlock{{Text: "half an answer"}}, Drop: true, InputTokens: 1234}
	}, nil)
	token := w.gw.Issue("sebastian", "chat-5")
	req, _ := http.NewRequest("POST", w.url+"/v1/messages", strings.NewReader(`{"model":"claude-haiku-4-5","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("x-api-key", token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil {
		t.Fatal("the cut stream read to a clean end through the gateway")
	}
	r := w.next(t)
	want := gateway.Usage{InputTokens: 1234, OutputTokens: 1}
	if r.Usage != want || r.Complete || r.Status != 200 || r.Model != "claude-haiku-4-5" || math.Abs(r.CostUSD-(1234*1.0+1*5.0)/1e6) > 1e-15 {
		t.Fatalf("recorded %+v", r)
	}
	if rest := w.drain(); len(rest) != 0 {
		t.Fatalf("recorded again: %+v", rest)
	}
}

// A CLI killed while the model streams: the request is recorded once, as
// incomplete, with the input tokens message_start reported, and the
// upstream request ends with it.
func TestRecordCLIKilled(t *testing.T) {
	t.Parallel()
	w := newWorld(t, func(scriptedmodel.Request) scriptedmodel.Reply {
		return scriptedmodel.Reply{Hang: true, InputTokens: 4321}
	}, nil)
	token := w.gw.Issue("petra", "chat-6")
	cmd := exec.Command(w.env.Binary, "-p", "hang", "--model", "claude-sonnet-4-5", "--output-format", "stream-json",
		"--verbose", "--include-partial-messages", "--setting-sources", "", "--tools", "")
	cmd.Dir = w.env.Vault("petra")
	cmd.Env = w.cliEnv(token)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	sc.Buffer(nil, 16<<20)
	started := false
	for !started && sc.Scan() {
		started = strings.Contains(sc.Text(), `"type":"message_start"`)
	}
	_ = cmd.Process.Kill()
	_, _ = io.Copy(io.Discard, out)
	_ = cmd.Wait()
	if !started {
		t.Fatal("the CLI never saw message_start")
	}
	r := w.next(t)
	if r.Usage.InputTokens != 4321 || r.Complete || r.Person != "petra" || r.Session != "chat-6" {
		t.Fatalf("recorded %+v", r)
	}
	if rest := w.drain(); len(rest) != 0 {
		t.Fatalf("recorded again: %+v", rest)
	}
}

// The gateway does not buffer a stream: the first event reaches the client
// while the upstream has not finished its answer (it waits for the test to
// read that event).
func TestStreamingUnbuffered(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":7,\"output_tokens\":1}}}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		fmt.Fprint(w, "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":9}}\n\n")
		fmt.Fprint(w, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	}))
	defer up.Close()
	records := make(chan gateway.Request, 1)
	gw, err := gateway.New(gateway.Config{Upstream: up.URL, Credential: gateway.APIKey(realKey), Logger: zerolog.Nop(),
		Record: func(r gateway.Request) { records <- r }})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	srv := httptest.NewServer(gw)
	defer srv.Close()
	req, _ := http.NewRequest("POST", srv.URL+"/v1/messages", strings.NewReader(`{"model":"claude-opus-4-6","stream":true}`))
	req.Header.Set("x-api-key", gw.Issue("sebastian", "chat-7"))
	type firstLine struct {
		resp *http.Response
		br   *bufio.Reader
		line string
		err  error
	}
	first := make(chan firstLine, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			first <- firstLine{err: err}
			return
		}
		br := bufio.NewReader(resp.Body)
		line, err := br.ReadString('\n')
		first <- firstLine{resp, br, line, err}
	}()
	// A generous bound on what, buffered, would never come.
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	var got firstLine
	select {
	case got = <-first:
	case <-timer.C:
		close(release)
		if got = <-first; got.resp != nil {
			got.resp.Body.Close()
		}
		t.Fatal("the first event did not reach the client while the upstream was still answering")
	}
	if got.err != nil {
		t.Fatal(got.err)
	}
	defer got.resp.Body.Close()
	if got.line != "event: message_start\n" {
		t.Fatalf("first line %q", got.line)
	}
	br := got.br
	close(release)
	if _, err := io.ReadAll(br); err != nil {
		t.Fatal(err)
	}
	r := <-records
	if r.Usage != (gateway.Usage{InputTokens: 7, OutputTokens: 9}) || !r.Complete || r.Status != 200 {
		t.Fatalf("recorded %+v", r)
	}
}

// Close ends every token and cuts what is in flight, recording it; a
// second Close is harmless.
func TestClose(t *testing.T) {
	t.Parallel()
	w := newWorld(t, func(scriptedmodel.Request) scriptedmodel.Reply {
		return scriptedmodel.Reply{Hang: true, InputTokens: 55}
	}, nil)
	token := w.gw.Issue("sebastian", "chat-8")
	req, _ := http.NewRequest("POST", w.url+"/v1/messages", strings.NewReader(`{"model":"claude-sonnet-4-5","stream":true}`))
	req.Header.Set("x-api-key", token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line, _ := bufio.NewReader(resp.Body).ReadString('\n')
	if line != "event: message_start\n" {
		t.Fatalf("first line %q", line)
	}
	if err := w.gw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.gw.Close(); err != nil {
		t.Fatal(err)
	}
	if r := w.next(t); r.Usage.InputTokens != 55 || r.Complete {
		t.Fatalf("recorded %+v", r)
	}
	if _, err := http.Post(w.url+"/v1/messages", "application/json", strings.NewReader("{}")); err == nil {
		t.Fatal("the gateway still answers after Close")
	}
}

// New refuses a configuration it cannot work with.
func TestNewValidates(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  gateway.Config
	}{
		{"no credential", gateway.Config{}},
		{"empty key", gateway.Config{Credential: gateway.APIKey("")}},
		{"upstream not a URL", gateway.Config{Credential: gateway.APIKey("k"), Upstream: "::"}},
		{"upstream not http", gateway.Config{Credential: gateway.APIKey("k"), Upstream: "ftp://example.com"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if g, err := gateway.New(tc.cfg); err == nil {
				g.Close()
				t.Fatal("accepted")
			}
		})
	}
}

// An upstream that cannot be reached: the CLI gets 502 in the API's
// format (one it may retry), and the request is recorded with no status.
func TestUpstreamUnreachable(t *testing.T) {
	t.Parallel()
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	records := make(chan gateway.Request, 1)
	gw, err := gateway.New(gateway.Config{Upstream: closed.URL, Credential: gateway.APIKey(realKey), Logger: zerolog.Nop(),
		Record: func(r gateway.Request) { records <- r }})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw)
	defer srv.Close()
	defer gw.Close()
	resp := do(t, "POST", srv.URL+"/v1/messages", "x-api-key", gw.Issue("petra", "chat-10"), `{"model":"claude-haiku-4-5"}`)
	if resp.status != 502 || !strings.Contains(resp.body, `"type":"api_error"`) || resp.header.Get("x-should-retry") != "true" {
		t.Fatalf("%d %v %s", resp.status, resp.header, resp.body)
	}
	if r := <-records; r.Status != 0 || r.Complete || r.CostUSD != 0 || r.Model != "claude-haiku-4-5" {
		t.Fatalf("recorded %+v", r)
	}
}
