package linkedin_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/linkedin"
	"github.com/majorhq/major/linkedin/linkedintest"
)

var (
	seb   = linkedin.Account{AccessToken: "tok-sebastian-SECRET", Author: "urn:li:person:seb"}
	petra = linkedin.Account{AccessToken: "tok-petra-SECRET", Author: "urn:li:person:petra"}
)

// sleeps records the waits the client asked for instead of waiting.
type sleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
	return ctx.Err()
}

func (s *sleeps) all() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.d...)
}

type fixture struct {
	api    *linkedintest.Server
	client *linkedin.Client
	sleeps *sleeps
	logs   *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func newFixture(tb testing.TB, mutate func(*linkedin.Config)) *fixture {
	tb.Helper()
	f := &fixture{api: linkedintest.New(tb, linkedin.DefaultVersion), sleeps: &sleeps{}, logs: &syncBuffer{}}
	f.api.AddAccount(seb.AccessToken, seb.Author)
	f.api.AddAccount(petra.AccessToken, petra.Author)
	cfg := linkedin.Config{
		BaseURL: f.api.URL,
		Sleep:   f.sleeps.sleep,
		Logger:  zerolog.New(f.logs),
	}
	if mutate != nil {
		mutate(&cfg)
	}
	f.client = linkedin.New(cfg)
	return f
}

func TestCreatePostRequest(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	urn, err := f.client.CreatePost(context.Background(), seb, "Hello (world) #go")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(urn, "urn:li:share:") {
		t.Fatalf("urn = %q", urn)
	}
	reqs := f.api.Requests()
	if len(reqs) != 1 {
		t.Fatalf("requests = %d", len(reqs))
	}
	r := reqs[0]
	checks := map[string][2]string{
		"method":       {r.Method, "POST"},
		"path":         {r.Path, "/rest/posts"},
		"version":      {r.Header.Get("LinkedIn-Version"), "202603"},
		"protocol":     {r.Header.Get("X-Restli-Protocol-Version"), "2.0.0"},
		"auth":         {r.Header.Get("Authorization"), "Bearer " + seb.AccessToken},
		"content type": {r.Header.Get("Content-Type"), "application/json"},
		"author":       {r.Body["author"].(string), seb.Author},
		"commentary":   {r.Body["commentary"].(string), `Hello \(world\) \#go`},
		"visibility":   {r.Body["visibility"].(string), "PUBLIC"},
		"lifecycle":    {r.Body["lifecycleState"].(string), "PUBLISHED"},
	}
	for name, c := range checks {
		if c[0] != c[1] {
			t.Errorf("%s = %q, want %q", name, c[0], c[1])
		}
	}
}

func TestEscapeLittleText(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"plain text, with comma.", "plain text, with comma."},
		{`a\b`, `a\\b`},
		{"(x) [y] {z} <w>", `\(x\) \[y\] \{z\} \<w\>`},
		{"@me #tag *b* _i_ ~s~ a|b", `\@me \#tag \*b\* \_i\_ \~s\~ a\|b`},
		{"äöü 😀\nline", "äöü 😀\nline"},
	}
	for _, tt := range tests {
		if got := linkedin.EscapeLittleText(tt.in); got != tt.want {
			t.Errorf("EscapeLittleText(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestRetries(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		script    []linkedintest.Response
		maxElapse time.Duration
		wantReqs  int
		wantErr   string // "" means success
		wantSleep func(testing.TB, []time.Duration)
	}{
		{
			name:     "429 with Retry-After then success",
			script:   []linkedintest.Response{{Status: 429, Header: http.Header{"Retry-After": {"7"}}}},
			wantReqs: 2,
			wantSleep: func(tb testing.TB, d []time.Duration) {
				if len(d) != 1 || d[0] != 7*time.Second {
					tb.Errorf("sleeps = %v, want [7s]", d)
				}
			},
		},
		{
			name:     "429 without Retry-After: backoff then success",
			script:   []linkedintest.Response{{Status: 429}, {Status: 429}, {Status: 429}},
			wantReqs: 4,
			wantSleep: func(tb testing.TB, d []time.Duration) {
				bounds := [][2]time.Duration{{250 * time.Millisecond, 500 * time.Millisecond}, {500 * time.Millisecond, time.Second}, {time.Second, 2 * time.Second}}
				if len(d) != len(bounds) {
					tb.Fatalf("sleeps = %v", d)
				}
				for i, b := range bounds {
					if d[i] < b[0] || d[i] > b[1] {
						tb.Errorf("sleep %d = %s, want within %v", i, d[i], b)
					}
				}
			},
		},
		{
			name:     "gives up after MaxAttempts",
			script:   []linkedintest.Response{{Status: 429}, {Status: 429}, {Status: 429}, {Status: 429}, {Status: 429}},
			wantReqs: 4,
			wantErr:  "linkedin POST /rest/posts: 429 Too Many Requests",
		},
		{
			name:      "Retry-After beyond the time budget is not waited for",
			script:    []linkedintest.Response{{Status: 429, Header: http.Header{"Retry-After": {"3600"}}}},
			maxElapse: 10 * time.Second,
			wantReqs:  1,
			wantErr:   "429",
		},
		{
			name:     "401 is not retried and says what LinkedIn answered",
			script:   []linkedintest.Response{{Status: 401, Body: `{"status":401,"serviceErrorCode":65600,"code":"INVALID_ACCESS_TOKEN","message":"Invalid access token"}`}},
			wantReqs: 1,
			wantErr:  "linkedin POST /rest/posts: 401 INVALID_ACCESS_TOKEN: Invalid access token",
		},
		{
			name:     "non-JSON error body is quoted",
			script:   []linkedintest.Response{{Status: 400, Body: "<html>\n  bad\n request</html>"}},
			wantReqs: 1,
			wantErr:  "400 <html> bad request</html>",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, func(c *linkedin.Config) { c.MaxElapsed = tt.maxElapse })
			f.api.Enqueue(tt.script...)
			urn, err := f.client.CreatePost(context.Background(), seb, "hi")
			if got := len(f.api.Requests()); got != tt.wantReqs {
				t.Errorf("requests = %d, want %d", got, tt.wantReqs)
			}
			if tt.wantErr == "" {
				if err != nil || urn == "" {
					t.Fatalf("urn=%q err=%v", urn, err)
				}
			} else if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
			}
			if tt.wantSleep != nil {
				tt.wantSleep(t, f.sleeps.all())
			}
			if strings.Contains(f.logs.String(), "SECRET") || (err != nil && strings.Contains(err.Error(), "SECRET")) {
				t.Fatalf("token leaked: logs %s err %v", f.logs.String(), err)
			}
		})
	}
}

func TestAPIErrorIsTyped(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	_, err := f.client.CreatePost(context.Background(), linkedin.Account{AccessToken: "unknown", Author: seb.Author}, "hi")
	var apiErr *linkedin.APIError
	if !errors.As(err, &apiErr) {
		t.Fatalf("err = %v, want an *APIError", err)
	}
	if apiErr.Status != 401 || apiErr.Message != "Invalid access token" || apiErr.Temporary() {
		t.Fatalf("api error = %+v", apiErr)
	}
}

func TestRetryWaitStopsWithContext(t *testing.T) {
	t.Parallel()
	// The real timer-based wait: a cancelled call must not sit out the
	// Retry-After.
	f := newFixture(t, func(c *linkedin.Config) { c.Sleep = nil })
	f.api.Enqueue(linkedintest.Response{Status: 429, Header: http.Header{"Retry-After": {"30"}}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	// Cancelled once the 429 was served: the call is in its wait.
	go func() {
		for len(f.api.Requests()) == 0 {
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(500 * time.Millisecond)
		cancel()
	}()
	_, err := f.client.CreatePost(ctx, seb, "hi")
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "429") {
		t.Fatalf("err = %v", err)
	}
	// Waiting out the Retry-After would take 30s.
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("took %s", took)
	}
}

func TestRetryAfterBeyondCallersDeadline(t *testing.T) {
	t.Parallel()
	// The caller's deadline is part of the budget: waiting past it would
	// only fail later.
	f := newFixture(t, func(c *linkedin.Config) { c.Sleep = nil })
	f.api.Enqueue(linkedintest.Response{Status: 429, Header: http.Header{"Retry-After": {"30"}}})
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	start := time.Now()
	_, err := f.client.CreatePost(ctx, seb, "hi")
	var apiErr *linkedin.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != 429 || apiErr.RetryAfter != 30*time.Second {
		t.Fatalf("err = %v", err)
	}
	// Waiting until the deadline would take 25s.
	if time.Since(start) > 15*time.Second {
		t.Fatalf("took %s", time.Since(start))
	}
}

func TestAttemptTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var mu sync.Mutex
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		if n == 1 {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"elements":[],"paging":{"total":0}}`))
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	s := &sleeps{}
	// Long enough for the second attempt's new connection on a loaded
	// machine.
	c := linkedin.New(linkedin.Config{BaseURL: srv.URL, AttemptTimeout: 2 * time.Second, Sleep: s.sleep})
	// A hung GET times out and is retried.
	page, err := c.Comments(context.Background(), seb, "urn:li:activity:1")
	if err != nil || len(page.Comments) != 0 {
		t.Fatalf("page=%+v err=%v", page, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls != 2 {
		t.Fatalf("calls = %d, want 2", calls)
	}
}

// TestPostNotRetriedAfterTransportError: a connection lost after the
// request went out leaves open whether it was applied; the lookup fails the
// same way, so the outcome is unknown and nothing is sent again.
func TestPostNotRetriedAfterTransportError(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if r.Method == http.MethodPost {
			calls++
		}
		mu.Unlock()
		// Drop the connection after reading the request: the post may or
		// may not have happened.
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = conn.(*net.TCPConn).Close()
		}
	}))
	t.Cleanup(srv.Close)
	c := linkedin.New(linkedin.Config{BaseURL: srv.URL, Sleep: (&sleeps{}).sleep})
	if _, err := c.CreatePost(context.Background(), seb, "hi"); !errors.Is(err, linkedin.ErrOutcomeUnknown) {
		t.Fatalf("err = %v, want ErrOutcomeUnknown", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls != 1 {
		t.Fatalf("a POST that failed in flight was sent %d times", calls)
	}
}

func TestCommentsAndReplies(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ctx := context.Background()
	post := "urn:li:activity:555"
	seeded := f.api.AddComment(post, "urn:li:person:other", "Nice post!")

	page, err := f.client.Comments(ctx, petra, post)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Comments) != 1 || page.Total != 1 {
		t.Fatalf("page = %+v", page)
	}
	got := page.Comments[0]
	if got.URN != seeded || got.Text != "Nice post!" || got.Actor != "urn:li:person:other" || got.Created.IsZero() {
		t.Fatalf("comment = %+v", got)
	}

	curn, err := f.client.CreateComment(ctx, petra, post, "Thanks (really)")
	if err != nil {
		t.Fatal(err)
	}
	if linkedin.ValidateCommentURN(curn) != nil {
		t.Fatalf("comment urn = %q", curn)
	}
	rurn, err := f.client.ReplyToComment(ctx, seb, post, seeded, "Agreed")
	if err != nil {
		t.Fatal(err)
	}
	if linkedin.ValidateCommentURN(rurn) != nil || rurn == curn {
		t.Fatalf("reply urn = %q", rurn)
	}

	reqs := f.api.Requests()
	if len(reqs) != 3 {
		t.Fatalf("requests = %d", len(reqs))
	}
	want := []struct{ method, path, token string }{
		{"GET", "/rest/socialActions/urn%3Ali%3Aactivity%3A555/comments", petra.AccessToken},
		{"POST", "/rest/socialActions/urn%3Ali%3Aactivity%3A555/comments", petra.AccessToken},
		{"POST", "/rest/socialActions/urn%3Ali%3Acomment%3A%28urn%3Ali%3Aactivity%3A555%2C7001%29/comments", seb.AccessToken},
	}
	for i, w := range want {
		r := reqs[i]
		if r.Method != w.method || r.Path != w.path || r.Token != w.token {
			t.Errorf("request %d = %s %s (token %s), want %s %s (token %s)", i, r.Method, r.Path, r.Token, w.method, w.path, w.token)
		}
		if r.Header.Get("LinkedIn-Version") != linkedin.DefaultVersion || r.Header.Get("X-Restli-Protocol-Version") != "2.0.0" {
			t.Errorf("request %d headers: %v", i, r.Header)
		}
	}
	if b := reqs[1].Body; b["actor"] != petra.Author || b["object"] != post || b["message"].(map[string]any)["text"] != "Thanks (really)" || b["parentComment"] != nil {
		t.Errorf("comment body = %v", b)
	}
	if b := reqs[2].Body; b["actor"] != seb.Author || b["object"] != post || b["parentComment"] != seeded || b["message"].(map[string]any)["text"] != "Agreed" {
		t.Errorf("reply body = %v", b)
	}

	// Replies are listed under the comment.
	replies, err := f.client.Comments(ctx, seb, seeded)
	if err != nil {
		t.Fatal(err)
	}
	if len(replies.Comments) != 1 || replies.Comments[0].URN != rurn || replies.Comments[0].ParentComment != seeded {
		t.Fatalf("replies = %+v", replies)
	}
}

// TestCommentURNFromHeaderOnly: some versions answer a create with an
// empty body and only the id in x-restli-id; the URN is then built from
// the post and that id. A body that does not decode is treated alike: the
// comment was created, so it is never reported as a plain failure.
func TestCommentURNFromHeaderOnly(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body, id string
		want           string
		wantNoID       bool
	}{
		{name: "empty body", id: "98765", want: "urn:li:comment:(urn:li:activity:1,98765)"},
		{name: "body that does not decode", body: "<html>created</html>", id: "98765", want: "urn:li:comment:(urn:li:activity:1,98765)"},
		{name: "neither", body: "<html>created</html>", wantNoID: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.id != "" {
					w.Header().Set("x-restli-id", tc.id)
				}
				w.WriteHeader(http.StatusCreated)
				_, _ = w.Write([]byte(tc.body))
			}))
			t.Cleanup(srv.Close)
			c := linkedin.New(linkedin.Config{BaseURL: srv.URL})
			urn, err := c.CreateComment(context.Background(), seb, "urn:li:activity:1", "x")
			if tc.wantNoID {
				if !errors.Is(err, linkedin.ErrNoID) {
					t.Fatalf("urn=%q err=%v, want ErrNoID", urn, err)
				}
				return
			}
			if err != nil || urn != tc.want {
				t.Fatalf("urn=%q err=%v", urn, err)
			}
		})
	}
}

func TestCreatePostWithoutIDIsAnError(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(srv.Close)
	c := linkedin.New(linkedin.Config{BaseURL: srv.URL})
	if _, err := c.CreatePost(context.Background(), seb, "x"); !errors.Is(err, linkedin.ErrNoID) {
		t.Fatalf("err = %v, want ErrNoID", err)
	}
}
