package readiness_test

import (
	"context"
	"errors"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/readiness"
	"github.com/majorhq/major/scriptedmodel"
)

// clock is a settable time.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

type world struct {
	model    *scriptedmodel.Server
	url      string
	versions atomic.Int64
	clock    *clock
}

func newWorld(tb testing.TB) *world {
	tb.Helper()
	w := &world{model: scriptedmodel.New(scriptedmodel.Script), clock: &clock{now: time.Unix(1_700_000_000, 0)}}
	srv := httptest.NewServer(w.model)
	tb.Cleanup(srv.Close)
	w.url = srv.URL
	return w
}

func (w *world) checker(tb testing.TB, env ...string) *readiness.Checker {
	return readiness.New(readiness.Config{
		Version: func(context.Context) (string, error) {
			w.versions.Add(1)
			return "2.1.330 (Claude Code)", nil
		},
		Env:    env,
		Now:    w.clock.Now,
		Logger: zerolog.New(zerolog.NewTestWriter(tb)),
	})
}

func TestCredentialChecks(t *testing.T) {
	closed := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		return "http://" + addr
	}()
	login := t.TempDir()
	if err := os.MkdirAll(filepath.Join(login, ".claude"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(login, ".claude", ".credentials.json"), []byte(`{"claudeAiOauth":{}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		require string // the only key the model accepts
		env     func(w *world) []string
		want    error
	}{
		{"good key", "k1", func(w *world) []string { return []string{"ANTHROPIC_BASE_URL=" + w.url, "ANTHROPIC_API_KEY=k1"} }, nil},
		{"good token", "t1", func(w *world) []string { return []string{"ANTHROPIC_BASE_URL=" + w.url, "ANTHROPIC_AUTH_TOKEN=t1"} }, nil},
		{"refused key", "k1", func(w *world) []string { return []string{"ANTHROPIC_BASE_URL=" + w.url, "ANTHROPIC_API_KEY=k2"} }, readiness.ErrCredentialRefused},
		{"empty key", "", func(w *world) []string {
			return []string{"ANTHROPIC_BASE_URL=" + w.url, "ANTHROPIC_API_KEY=", "HOME=" + t.TempDir()}
		}, readiness.ErrNoCredential},
		{"no key", "", func(w *world) []string { return []string{"ANTHROPIC_BASE_URL=" + w.url} }, readiness.ErrNoCredential},
		{"login file", "", func(w *world) []string { return []string{"ANTHROPIC_BASE_URL=" + w.url, "HOME=" + login} }, nil},
		{"unreachable", "", func(w *world) []string { return []string{"ANTHROPIC_BASE_URL=" + closed, "ANTHROPIC_API_KEY=k1"} }, readiness.ErrAPIUnreachable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			w.model.RequireKey(tc.require)
			version, err := w.checker(t, tc.env(w)...).Check(context.Background())
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("check: %v, want %v", err, tc.want)
			}
			if err == nil && version == "" {
				t.Fatal("ready without a version")
			}
		})
	}
}

// However many probes ask, the CLI runs and the API is asked once per TTL
// (a good answer) or fail TTL (a bad one).
func TestCheckIsCached(t *testing.T) {
	w := newWorld(t)
	w.model.RequireKey("good")
	c := w.checker(t, "ANTHROPIC_BASE_URL="+w.url, "ANTHROPIC_API_KEY=good")
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Check(context.Background()); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if v, m := w.versions.Load(), w.model.ModelListings(); v != 1 || m != 1 {
		t.Fatalf("20 probes ran the CLI %d times and asked the API %d times, want 1 and 1", v, m)
	}
	w.clock.advance(4 * time.Minute)
	_, _ = c.Check(context.Background())
	if v := w.versions.Load(); v != 1 {
		t.Fatalf("checked again within the TTL: %d", v)
	}
	w.clock.advance(2 * time.Minute)
	w.model.RequireKey("other")
	if _, err := c.Check(context.Background()); !errors.Is(err, readiness.ErrCredentialRefused) {
		t.Fatalf("after the TTL a revoked key is found: %v", err)
	}
	for range 5 {
		_, _ = c.Check(context.Background())
	}
	if v, m := w.versions.Load(), w.model.ModelListings(); v != 2 || m != 2 {
		t.Fatalf("a failed check is cached too: %d CLI runs, %d API calls", v, m)
	}
	w.clock.advance(31 * time.Second)
	w.model.RequireKey("good")
	if _, err := c.Check(context.Background()); err != nil {
		t.Fatalf("a fixed key is seen after the fail TTL: %v", err)
	}
}
