package auth_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/auth"
	"github.com/majorhq/major/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// tokenFile writes content as a token file in a temp dir.
func tokenFile(tb testing.TB, content string) string {
	tb.Helper()
	p := filepath.Join(tb.TempDir(), "tokens.json")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		tb.Fatal(err)
	}
	return p
}

// open opens a store on path with a clock of the test's.
func open(tb testing.TB, path string, now func() time.Time) *auth.Store {
	tb.Helper()
	s, err := auth.Open(auth.Config{Path: path, Logger: zerolog.Nop(), Now: now, Poll: 10 * time.Millisecond})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	return s
}

func TestPlainFileWorksAndIsRewrittenHashedOnFirstChange(t *testing.T) {
	path := tokenFile(t, `{"tokens": {"old-secret": ["sebastian", "petra"]}}`)
	s := open(t, path, nil)
	id, ok := s.Authenticate("old-secret")
	if !ok || !id.Can("petra") || !id.Can("sebastian") {
		t.Fatalf("plain token: %+v %v", id, ok)
	}
	var tok string
	if err := auth.Edit(path, func(f *auth.File) error {
		var err error
		tok, err = f.Add("Pixel 8", []string{"sebastian"}, time.Now())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "old-secret") || strings.Contains(string(b), tok) {
		t.Fatalf("a token in plain text on disk:\n%s", b)
	}
	for _, tc := range []struct{ token, person string }{{"old-secret", "petra"}, {tok, "sebastian"}} {
		if id, ok := s.Authenticate(tc.token); !ok || !id.Can(tc.person) {
			t.Errorf("after the rewrite, %q: %+v %v", tc.person, id, ok)
		}
	}
	if id, _ := s.Authenticate(tok); id.Name != "Pixel 8" || id.Can("petra") {
		t.Errorf("new token: %+v", id)
	}
}

func TestBadFilesAreRefused(t *testing.T) {
	for _, tc := range []struct{ name, content, want string }{
		{"not JSON", `{`, "not JSON"},
		{"no tokens", `{"tokens": {}}`, "no tokens"},
		{"bad person", `{"tokens": {"t": ["Seb/../x"]}}`, "plain lowercase"},
		{"bad digest", `{"tokens": [{"name": "a", "sha256": "zz", "persons": ["petra"]}]}`, "SHA-256"},
		{"same name twice", `{"tokens": [{"name": "a", "sha256": "` + auth.Digest("1") + `", "persons": ["petra"]}, {"name": "a", "sha256": "` + auth.Digest("2") + `", "persons": ["petra"]}]}`, "two tokens"},
		{"unknown key", `{"tokens": [{"name": "a", "sha256": "` + auth.Digest("1") + `", "persons": ["petra"], "token": "x"}]}`, "unknown field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := auth.Open(auth.Config{Path: tokenFile(t, tc.content), Logger: zerolog.Nop()})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

func TestRevokedTokenIsRefusedAtOnceAndWatchersHear(t *testing.T) {
	path := tokenFile(t, `{"tokens": []}`)
	var keep, gone string
	if err := auth.Edit(path, func(f *auth.File) error {
		keep, _ = f.Add("laptop", []string{"petra"}, time.Now())
		var err error
		gone, err = f.Add("phone", []string{"petra"}, time.Now())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	s := open(t, path, nil)
	id, ok := s.Authenticate(gone)
	if !ok {
		t.Fatal("new token refused")
	}
	var changed atomic.Int32
	heard := make(chan struct{}, 10)
	s.OnChange(func() { changed.Add(1); heard <- struct{}{} })
	// As `major token revoke` does, from another process.
	if err := auth.Edit(path, func(f *auth.File) error { return f.Revoke("phone") }); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Authenticate(gone); ok {
		t.Fatal("a revoked token was accepted on the next request")
	}
	if _, ok := s.Authenticate(keep); !ok {
		t.Fatal("the other token was refused")
	}
	<-heard
	if s.Valid(id.ID) {
		t.Fatal("Valid says the revoked token is valid")
	}
	if err := auth.Edit(path, func(f *auth.File) error { return f.Revoke("phone") }); !errors.Is(err, auth.ErrNotFound) {
		t.Fatalf("revoking again: %v", err)
	}
}

func TestLastUseIsWritten(t *testing.T) {
	path := tokenFile(t, `{"tokens": {"tok": ["petra"]}}`)
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	s := open(t, path, func() time.Time { return at })
	if _, ok := s.Authenticate("tok"); !ok {
		t.Fatal("refused")
	}
	if got := s.List("petra"); len(got) != 1 || !got[0].LastUsed.Equal(at) {
		t.Fatalf("list: %+v", got)
	}
	s.Close()
	f, err := auth.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if f.Plain || len(f.Tokens) != 1 || !f.Tokens[0].LastUsed.Equal(at) {
		t.Fatalf("file after close: %+v", f)
	}
}

func TestPersonRevokesOnlyTheirOwnTokens(t *testing.T) {
	path := tokenFile(t, `{"tokens": []}`)
	if err := auth.Edit(path, func(f *auth.File) error {
		f.Add("shared", []string{"petra", "sebastian"}, time.Now())
		f.Add("petra's phone", []string{"petra"}, time.Now())
		_, err := f.Add("sebastian's phone", []string{"sebastian"}, time.Now())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	s := open(t, path, nil)
	for _, tc := range []struct {
		name, person, token string
		want                error
	}{
		{"another person's", "petra", "sebastian's phone", auth.ErrNotFound},
		{"shared", "petra", "shared", auth.ErrShared},
		{"unknown", "petra", "nope", auth.ErrNotFound},
		{"own", "petra", "petra's phone", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := s.Revoke(tc.person, tc.token); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	var names []string
	for _, tok := range s.List("petra") {
		names = append(names, tok.Name)
	}
	if strings.Join(names, ",") != "shared" {
		t.Fatalf("petra's tokens after: %v", names)
	}
}

func TestPairingCodeIsSingleUseAndExpires(t *testing.T) {
	path := tokenFile(t, `{"tokens": {"tok": ["petra"]}}`)
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	var clock atomic.Pointer[time.Time]
	clock.Store(&now)
	s := open(t, path, func() time.Time { return *clock.Load() })

	p, err := s.Pair("petra", "Phone")
	if err != nil {
		t.Fatal(err)
	}
	typed := strings.ToLower(strings.ReplaceAll(p.Code, "-", " "))
	tok, id, err := s.Redeem(typed, "")
	if err != nil {
		t.Fatalf("redeem %q (typed %q): %v", p.Code, typed, err)
	}
	if got, ok := s.Authenticate(tok); !ok || got.Name != "Phone" || !got.Can("petra") || got.ID != id.ID {
		t.Fatalf("paired token: %+v %v", got, ok)
	}
	if _, _, err := s.Redeem(p.Code, ""); !errors.Is(err, auth.ErrBadCode) {
		t.Fatalf("second use: %v", err)
	}

	q, _ := s.Pair("petra", "Phone")
	later := now.Add(10 * time.Minute)
	clock.Store(&later)
	if _, _, err := s.Redeem(q.Code, ""); !errors.Is(err, auth.ErrBadCode) {
		t.Fatalf("after 10 minutes: %v", err)
	}
	r, _ := s.Pair("petra", "Phone")
	_, second, err := s.Redeem(r.Code, "")
	if err != nil || second.Name != "Phone 2" {
		t.Fatalf("a second device of the same name: %+v %v", second, err)
	}
	b, _ := os.ReadFile(path)
	var f map[string]any
	if err := json.Unmarshal(b, &f); err != nil || strings.Contains(string(b), tok) {
		t.Fatalf("file after pairing:\n%s", b)
	}
}

func TestLimiter(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	l := auth.NewLimiter(3, 10*time.Second, func() time.Time { return now })
	for _, tc := range []struct {
		name  string
		fails int
		pass  time.Duration
		addr  string
		want  time.Duration
	}{
		{"unknown address", 0, 0, "a", 0},
		{"within the burst", 2, 0, "a", 0},
		{"burst used up", 1, 0, "a", 10 * time.Second},
		{"another address is free", 0, 0, "b", 0},
		{"partly earned back", 0, 4 * time.Second, "a", 6 * time.Second},
		{"earned back", 0, 6 * time.Second, "a", 0},
		{"used again", 1, 0, "a", 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now = now.Add(tc.pass)
			for range tc.fails {
				l.Fail(tc.addr)
			}
			if got := l.Wait(tc.addr); got != tc.want {
				t.Fatalf("wait %v, want %v", got, tc.want)
			}
		})
	}
}
