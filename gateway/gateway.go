// Package gateway is the model gateway: the only holder of the server's
// Anthropic credential, and the one place model requests are admitted and
// counted. Every claude process reaches the API through it
// (ANTHROPIC_BASE_URL) with a token of its own session
// (ANTHROPIC_API_KEY), which the gateway swaps for the real credential. It
// refuses a request whose person or session has spent its budget before
// anything is sent upstream, and reports what each request used, however
// it ended.
//
// It owns the credential (and a login file's refresh), the session tokens,
// the per-request accounting and refusal, and, where a budget applies,
// the order of a session's model requests (one at a time). It must not
// keep any other session state, decide budgets (Admit and Budgeted do),
// serve the server's HTTP API, or start a CLI.
package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// DefaultUpstream is the Anthropic API.
const DefaultUpstream = "https://api.anthropic.com"

// maxRequestBody is the API's own limit on a Messages request.
const maxRequestBody = 32 << 20

// tokenPrefix marks a session token, so one found where it should not be
// is recognised.
const tokenPrefix = "major-session-"

// Config configures a Gateway.
type Config struct {
	// Upstream is the API's base URL (the server's ANTHROPIC_BASE_URL);
	// default DefaultUpstream. http is allowed (a local proxy, tests).
	Upstream string
	// Credential is put on every request forwarded; required.
	Credential Credential
	// OAuthTokenURL is where a login file's token is refreshed; default
	// DefaultOAuthTokenURL.
	OAuthTokenURL string
	// Transport makes the upstream requests (and refreshes); default a
	// clone of http.DefaultTransport, closed with the gateway.
	Transport http.RoundTripper
	// Admit is asked before every model request (POST /v1/messages); an
	// error refuses it, and nothing is sent upstream. Its text tells the
	// CLI (and so the person) which budget is spent. Nil admits all.
	Admit func(person, session string) error
	// Budgeted tells whether a budget applies to person's session (its
	// own, or the person's day). While one does, the gateway sends one
	// model request of the session upstream at a time: the others wait
	// (as long as their CLI does) until it has ended and been recorded,
	// and are then asked of Admit, which sees what it cost. Requests sent
	// at once cannot all pass a check that counts none of them: a budget
	// is overshot by at most the one request per session that crosses it.
	// Nil, or false: requests go upstream in parallel, unchecked by turn.
	Budgeted func(person, session string) bool
	// Refused is told about each request Admit refused.
	Refused func(person, session string, err error)
	// Record is called exactly once for every model request the gateway
	// forwarded (an upstream that could not be reached included), when
	// it ended, however it ended (a stream cut half way reports what it
	// had seen). It runs on the request's goroutine: keep it short.
	Record func(Request)
	// Prices replace or add to the built-in prices, by model name or
	// catalog id (see Canonical).
	Prices map[string]Price
	// BodyTimeout bounds how long a request's body may take to arrive
	// once its headers are in; default DefaultBodyTimeout.
	BodyTimeout time.Duration
	Now         func() time.Time
	Logger      zerolog.Logger
}

// Request is one model request as it ended.
type Request struct {
	Person  string
	Session string
	// Model is the model that served the request, as its answer named it
	// (message_start's, or the message's); the model the request asked for
	// when the answer named none.
	Model string
	Usage Usage
	// CostUSD is what Usage costs at the model's price, the figure the
	// CLI reports for the same request.
	CostUSD float64
	// Status is the upstream's HTTP status; 0 when no answer came (the
	// API could not be reached, or the CLI went away first).
	Status int
	// Complete: the answer ended normally and the CLI got all of it.
	Complete bool
	Start    time.Time
	Duration time.Duration
}

// tokenKey is a session token's SHA-256, what the gateway keeps of it.
type tokenKey = [sha256.Size]byte

// grant is what a session token stands for.
type grant struct {
	person, session string
}

// Gateway is the model gateway; it is an http.Handler, or serves on its
// own listener (Listen).
type Gateway struct {
	cfg       Config
	log       zerolog.Logger
	upstream  *url.URL
	auth      authorizer
	transport http.RoundTripper
	ownsTrans bool
	proxy     *httputil.ReverseProxy
	stopCtx   context.Context
	stop      context.CancelFunc

	bodyTimeout time.Duration

	mu      sync.Mutex
	grants  map[tokenKey]grant // by the token's hash: never compared byte by byte
	turns   map[grant]*turn    // budgeted sessions with a model request in flight or waiting
	unknown map[string]bool    // unknown models already logged
	// requests counts each token's requests in the gateway; bodyBytes
	// and personBytes are the bytes of request bodies held, in all and
	// per person (see bodies.go).
	requests    map[tokenKey]int
	bodyBytes   int64
	personBytes map[string]int64
	closed      bool
	srv         *http.Server
	served      chan struct{}
	inflight    sync.WaitGroup

	closeOnce sync.Once
}

// New returns a Gateway for cfg; it serves nothing until it is used as a
// handler or Listen is called. A bad Upstream or a missing credential is
// an error.
func New(cfg Config) (*Gateway, error) {
	if cfg.Upstream == "" {
		cfg.Upstream = DefaultUpstream
	}
	up, err := url.Parse(cfg.Upstream)
	if err != nil || (up.Scheme != "http" && up.Scheme != "https") || up.Host == "" {
		return nil, fmt.Errorf("model gateway: upstream %q is not an http(s) URL", cfg.Upstream)
	}
	if cfg.OAuthTokenURL == "" {
		cfg.OAuthTokenURL = DefaultOAuthTokenURL
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.BodyTimeout <= 0 {
		cfg.BodyTimeout = DefaultBodyTimeout
	}
	g := &Gateway{cfg: cfg, log: cfg.Logger.With().Str("component", "gateway").Logger(), upstream: up,
		transport: cfg.Transport, bodyTimeout: cfg.BodyTimeout, grants: map[tokenKey]grant{}, turns: map[grant]*turn{},
		unknown: map[string]bool{}, requests: map[tokenKey]int{}, personBytes: map[string]int64{}}
	if g.transport == nil {
		g.transport, g.ownsTrans = http.DefaultTransport.(*http.Transport).Clone(), true
	}
	c := cfg.Credential
	if c.kind != kindNone && c.kind != kindLoginFile && c.secret == "" {
		return nil, fmt.Errorf("model gateway: the %s is empty", c)
	}
	switch c.kind {
	case kindAPIKey:
		g.auth = static{name: "x-api-key", value: c.secret}
	case kindAuthToken:
		g.auth = static{name: "Authorization", value: "Bearer " + c.secret}
	case kindOAuthToken:
		g.auth = static{name: "Authorization", value: "Bearer " + c.secret, oauth: true}
	case kindLoginFile:
		g.auth = &loginFile{path: c.file, tokenURL: cfg.OAuthTokenURL, now: cfg.Now, log: g.log,
			client: &http.Client{Transport: g.transport, Timeout: refreshTimeout}}
	default:
		return nil, fmt.Errorf("model gateway: %w", ErrNoCredential)
	}
	g.stopCtx, g.stop = context.WithCancel(context.Background())
	g.proxy = &httputil.ReverseProxy{
		Rewrite:   g.rewrite,
		Transport: g.transport,
		// Every chunk reaches the CLI as soon as it arrives.
		FlushInterval:  -1,
		ModifyResponse: g.modifyResponse,
		ErrorHandler:   g.proxyError,
		ErrorLog:       log.New(zerologWriter{g.log}, "", 0),
	}
	return g, nil
}

// Issue makes a token for a CLI of person's session (session "" for a
// process started ahead for the person's next new chat: Bind names it
// later). The CLI gets it as ANTHROPIC_API_KEY; it is valid at this
// gateway only, until Revoke.
func (g *Gateway) Issue(person, session string) string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	token := tokenPrefix + base64.RawURLEncoding.EncodeToString(b)
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed {
		g.grants[sha256.Sum256([]byte(token))] = grant{person: person, session: session}
	}
	return token
}

// Bind moves token to session: the process that holds it (one started
// ahead) now serves that session, and its requests count there from the
// next one on. An unknown token is ignored.
func (g *Gateway) Bind(token, session string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	h := sha256.Sum256([]byte(token))
	if gr, ok := g.grants[h]; ok {
		gr.session = session
		g.grants[h] = gr
	}
}

// Revoke ends token: from the next request on it gets 401; requests
// already in flight finish.
func (g *Gateway) Revoke(token string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.grants, sha256.Sum256([]byte(token)))
}

// Listen serves the gateway on addr (a loopback address such as
// "127.0.0.1:0") until Close, and returns its base URL for
// ANTHROPIC_BASE_URL.
func (g *Gateway) Listen(addr string) (string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed || g.srv != nil {
		return "", errors.New("model gateway: already listening or closed")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("model gateway: %w", err)
	}
	// No read or write timeout: a stream lasts as long as the model
	// writes; the CLI has its own.
	g.srv = &http.Server{Handler: g, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: log.New(zerologWriter{g.log}, "", 0)}
	g.served = make(chan struct{})
	go func(srv *http.Server, done chan struct{}) {
		defer close(done)
		_ = srv.Serve(ln) // ends at Close
	}(g.srv, g.served)
	return "http://" + ln.Addr().String(), nil
}

// Close stops the gateway: every token ends, requests in flight are cut
// (each is still recorded), and it returns once they have. It is
// idempotent.
func (g *Gateway) Close() error {
	g.closeOnce.Do(func() {
		g.mu.Lock()
		g.closed = true
		clear(g.grants)
		srv, served := g.srv, g.served
		g.mu.Unlock()
		g.stop()
		if srv != nil {
			_ = srv.Close()
			<-served
		}
		g.inflight.Wait()
		if t, ok := g.transport.(*http.Transport); ok && g.ownsTrans {
			t.CloseIdleConnections()
		}
	})
	return nil
}

// enter counts a request in, unless the gateway is closed.
func (g *Gateway) enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.inflight.Add(1)
	return true
}

// grantOf finds the grant of the session token a request carries, as
// x-api-key or as a bearer token, and the token's key.
func (g *Gateway) grantOf(r *http.Request) (grant, tokenKey, bool) {
	token := r.Header.Get("x-api-key")
	if token == "" {
		token, _ = strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	}
	if token == "" {
		return grant{}, tokenKey{}, false
	}
	key := sha256.Sum256([]byte(token))
	g.mu.Lock()
	defer g.mu.Unlock()
	gr, ok := g.grants[key]
	return gr, key, ok
}

// route says whether the gateway forwards a request, and whether it is a
// model request (admitted and metered). Only what the CLI needs passes:
// the rest of the API (batches, files, the admin API, ...) would spend or
// reach what a session must not, unmetered.
func route(method, path string) (forward, model bool) {
	switch {
	case method == http.MethodPost && path == "/v1/messages":
		return true, true
	case method == http.MethodPost && path == "/v1/messages/count_tokens":
		return true, false
	case method == http.MethodGet && path == "/v1/models":
		return true, false
	case method == http.MethodGet && strings.HasPrefix(path, "/v1/models/"):
		id := strings.TrimPrefix(path, "/v1/models/")
		return id != "" && !strings.ContainsAny(id, "/\\") && id != "." && id != "..", false
	}
	return false, false
}

// forwarding is what the proxy's hooks need of one request.
type forwarding struct {
	auth authHeader
	m    *meter // nil: not a model request
}

type forwardingKey struct{}

// ServeHTTP implements http.Handler.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := g.cfg.Now()
	if !g.enter() {
		writeError(w, http.StatusServiceUnavailable, "api_error", "the model gateway is shutting down")
		return
	}
	defer g.inflight.Done()
	gr, key, ok := g.grantOf(r)
	if !ok {
		g.log.Warn().Str("method", r.Method).Str("path", r.URL.Path).Msg("refused a request without a valid session token")
		writeError(w, http.StatusUnauthorized, "authentication_error", "invalid session token: unknown, or its session ended")
		return
	}
	forward, model := route(r.Method, r.URL.Path)
	if !forward {
		g.log.Warn().Str("person", gr.person).Str("session", gr.session).Str("method", r.Method).Str("path", r.URL.Path).
			Msg("refused a request the model gateway does not forward")
		writeError(w, http.StatusNotFound, "not_found_error", "the model gateway does not serve "+r.Method+" "+r.URL.Path)
		return
	}
	leave, ok := g.enterRequest(key)
	if !ok {
		g.log.Warn().Str("person", gr.person).Str("session", gr.session).Int("limit", maxRequestsPerToken).
			Msg("refused a request: its token has as many in the gateway as it may")
		w.Header().Set("Connection", "close")
		w.Header().Set("x-should-retry", "true")
		writeError(w, http.StatusTooManyRequests, "rate_limit_error",
			fmt.Sprintf("this session has %d requests at the model gateway already; try again shortly", maxRequestsPerToken))
		return
	}
	defer leave()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(g.stopCtx, cancel)()

	// A body is read whole before anything else (a model request may
	// wait for its turn, and is refused if its budget is spent), and sent
	// upstream from memory.
	var modelName string
	if r.ContentLength != 0 {
		held, err := g.readBody(w, r, gr.person)
		if err != nil {
			g.bodyError(w, gr, err)
			return
		}
		defer held.free()
		if model {
			modelName = modelOf(held.b)
		}
		r.Body, _ = held.reader()
		r.ContentLength, r.TransferEncoding = int64(len(held.b)), nil
		// The transport may resend a request that never left (a kept-alive
		// connection the upstream had closed); the same bytes again.
		r.GetBody = held.reader
	}
	fw := &forwarding{}
	if model {
		// Waits after the body is read: from then on the server sees the
		// CLI go away, and the wait ends with it.
		if g.cfg.Budgeted != nil && g.cfg.Budgeted(gr.person, gr.session) {
			done, err := g.takeTurn(ctx, gr)
			if err != nil {
				writeError(w, http.StatusServiceUnavailable, "api_error", "the model request was given up while it waited for the chat's previous one")
				return
			}
			// After the request is recorded (deferred later, run first).
			defer done()
		}
		if g.cfg.Admit != nil {
			if err := g.cfg.Admit(gr.person, gr.session); err != nil {
				g.refuse(w, gr, err)
				return
			}
		}
		fw.m = &meter{}
	}
	auth, err := g.auth.authorize(ctx)
	if err != nil {
		g.log.Error().Err(err).Msg("the model gateway's credential cannot be used")
		writeError(w, http.StatusUnauthorized, "authentication_error", "the server's Anthropic credential cannot be used (its log says why)")
		return
	}
	fw.auth = auth
	if fw.m != nil {
		defer func() {
			// A stream that broke off is ended by the proxy with
			// http.ErrAbortHandler, so the CLI sees it cut too: it is
			// recorded, and the panic goes on to the server.
			p := recover()
			g.record(gr, modelName, fw.m, p == nil, start)
			if p != nil {
				panic(p)
			}
		}()
	}
	g.proxy.ServeHTTP(w, r.WithContext(context.WithValue(ctx, forwardingKey{}, fw)))
}

// turn lets one model request of a budgeted session go at a time: slot
// holds the one in flight; waiting counts those that want it, so the turn
// is forgotten when none does.
type turn struct {
	slot    chan struct{}
	waiting int
}

// takeTurn waits until no other model request of gr's session is in
// flight, or ctx ends; done ends the turn, once the request is recorded.
func (g *Gateway) takeTurn(ctx context.Context, gr grant) (done func(), err error) {
	g.mu.Lock()
	t := g.turns[gr]
	if t == nil {
		t = &turn{slot: make(chan struct{}, 1)}
		g.turns[gr] = t
	}
	t.waiting++
	g.mu.Unlock()
	leave := func() {
		g.mu.Lock()
		if t.waiting--; t.waiting == 0 {
			delete(g.turns, gr)
		}
		g.mu.Unlock()
	}
	select {
	case t.slot <- struct{}{}:
		return func() {
			<-t.slot
			leave()
		}, nil
	case <-ctx.Done():
		leave()
		return nil, ctx.Err()
	}
}

// refuse answers a request Admit refused: 402 billing_error, a status the
// CLI does not retry; it ends the turn with this message as its error.
func (g *Gateway) refuse(w http.ResponseWriter, gr grant, err error) {
	g.log.Info().Str("person", gr.person).Str("session", gr.session).Str("reason", err.Error()).Msg("refused a model request")
	if g.cfg.Refused != nil {
		g.cfg.Refused(gr.person, gr.session, err)
	}
	writeError(w, http.StatusPaymentRequired, "billing_error", err.Error())
}

// rewrite points a request at the upstream and swaps the session token
// for the credential. X-Forwarded-* stay off: the API learns nothing of
// the CLI's side.
func (g *Gateway) rewrite(pr *httputil.ProxyRequest) {
	pr.SetURL(g.upstream)
	pr.Out.Header.Del("x-api-key")
	pr.Out.Header.Del("Authorization")
	if fw, _ := pr.In.Context().Value(forwardingKey{}).(*forwarding); fw != nil {
		fw.auth.set(pr.Out.Header)
		if fw.m != nil {
			// The CLI asks for gzip, br and zstd; an answer so encoded
			// leaves the meter nothing to read. Asked as it is, each
			// chunk is read as it passes, and nothing is held in a
			// decoder; between the gateway and the CLI, on loopback,
			// compression saves nothing.
			pr.Out.Header.Set("Accept-Encoding", "identity")
		}
	}
}

func (g *Gateway) modifyResponse(resp *http.Response) error {
	fw, _ := resp.Request.Context().Value(forwardingKey{}).(*forwarding)
	if fw == nil || fw.m == nil {
		return nil
	}
	fw.m.status = resp.StatusCode
	if enc := resp.Header.Get("Content-Encoding"); enc != "" && !strings.EqualFold(enc, "identity") {
		// Encoded although asked not to be: never passed on unmetered.
		return fmt.Errorf("%w (%s)", errUnmeterable, enc)
	}
	ct := resp.Header.Get("Content-Type")
	fw.m.sse = strings.HasPrefix(ct, "text/event-stream")
	resp.Body = &meteredBody{ReadCloser: resp.Body, m: fw.m}
	return nil
}

// errUnmeterable refuses a model answer the meter cannot read.
var errUnmeterable = errors.New("the model API answered in an encoding the gateway cannot meter")

// proxyError answers a request whose upstream could not be reached, or
// whose answer cannot be metered.
func (g *Gateway) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		return // the CLI went away, or the gateway is closing
	}
	if errors.Is(err, errUnmeterable) {
		g.log.Error().Err(err).Str("path", r.URL.Path).Msg("refused a model answer that cannot be metered")
		writeError(w, http.StatusBadGateway, "api_error", errUnmeterable.Error())
		return
	}
	g.log.Warn().Err(err).Str("path", r.URL.Path).Msg("the model API cannot be reached")
	// Unlike the gateway's own refusals, this one is worth a retry, as
	// the CLI would retry the API itself.
	w.Header().Set("x-should-retry", "true")
	writeError(w, http.StatusBadGateway, "api_error", "the model API cannot be reached")
}

// record reports one model request, priced by the model that served it as
// the answer named it: a body may name a model twice, and the upstream's
// JSON reader may keep another than modelOf's first. The model asked for
// counts only when the answer named none (it failed, or was cut first).
func (g *Gateway) record(gr grant, asked string, m *meter, copied bool, start time.Time) {
	model := m.model
	if model == "" {
		model = asked
	}
	price, known := prices(g.cfg.Prices, model)
	if !known {
		g.logUnknown(model)
	}
	req := Request{Person: gr.person, Session: gr.session, Model: model, Usage: m.usage, CostUSD: price.Cost(m.usage),
		Status: m.status, Complete: copied && m.complete(), Start: start, Duration: g.cfg.Now().Sub(start)}
	g.log.Debug().Str("person", req.Person).Str("session", req.Session).Str("model", model).Int("status", req.Status).
		Bool("complete", req.Complete).Float64("cost_usd", req.CostUSD).Msg("model request")
	if g.cfg.Record != nil {
		g.cfg.Record(req)
	}
}

// maxUnknownLogged bounds the memory of unknown model names logged.
const maxUnknownLogged = 64

func (g *Gateway) logUnknown(model string) {
	g.mu.Lock()
	seen := g.unknown[model]
	if !seen && len(g.unknown) < maxUnknownLogged {
		g.unknown[model] = true
	}
	g.mu.Unlock()
	if !seen {
		g.log.Warn().Str("model", model).Msg("no price for this model: counted at the CLI's price for models it does not know (claude-opus-5-5's)")
	}
}

// modelOf finds the "model" of a request body without decoding the rest
// (the CLI sends it first).
func modelOf(body []byte) string {
	dec := json.NewDecoder(bytes.NewReader(body))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return ""
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return ""
		}
		if t == "model" {
			var s string
			if dec.Decode(&s) != nil {
				return ""
			}
			return s
		}
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return ""
		}
	}
	return ""
}

// writeError answers in the API's error format; x-should-retry false
// (unless set already) keeps the CLI from retrying.
func writeError(w http.ResponseWriter, status int, kind, msg string) {
	w.Header().Set("Content-Type", "application/json")
	if w.Header().Get("x-should-retry") == "" {
		w.Header().Set("x-should-retry", "false")
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": "error", "error": map[string]string{"type": kind, "message": msg}})
}

// zerologWriter sends net/http's own log lines to the gateway's logger.
type zerologWriter struct{ log zerolog.Logger }

func (z zerologWriter) Write(p []byte) (int, error) {
	z.log.Debug().Msg(strings.TrimSpace(string(p)))
	return len(p), nil
}
