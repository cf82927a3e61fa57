package gateway_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/gateway"
	"github.com/majorhq/major/scriptedmodel"
)

func TestCredentialFromEnv(t *testing.T) {
	withLogin := t.TempDir()
	writeLogin(t, filepath.Join(withLogin, ".credentials.json"), "access", "refresh", time.Now().Add(time.Hour))
	home := t.TempDir()
	writeLogin(t, filepath.Join(home, ".claude", ".credentials.json"), "access", "refresh", time.Now().Add(time.Hour))
	for _, tc := range []struct {
		name string
		env  []string
		want string // the credential's String, or the error's text
		err  error
	}{
		{"api key first", []string{"ANTHROPIC_API_KEY=k", "ANTHROPIC_AUTH_TOKEN=t", "CLAUDE_CODE_OAUTH_TOKEN=o"}, "API key", nil},
		{"auth token", []string{"ANTHROPIC_API_KEY=", "ANTHROPIC_AUTH_TOKEN=t", "CLAUDE_CODE_OAUTH_TOKEN=o"}, "auth token", nil},
		{"oauth token", []string{"CLAUDE_CODE_OAUTH_TOKEN=o", "CLAUDE_CONFIG_DIR=" + withLogin}, "OAuth token", nil},
		{"login file in the config dir", []string{"CLAUDE_CONFIG_DIR=" + withLogin, "HOME=" + t.TempDir()}, "claude login file " + filepath.Join(withLogin, ".credentials.json"), nil},
		{"login file in HOME", []string{"HOME=" + home}, "claude login file " + filepath.Join(home, ".claude", ".credentials.json"), nil},
		{"a later value wins", []string{"ANTHROPIC_API_KEY=k", "ANTHROPIC_API_KEY="}, "", gateway.ErrNoCredential},
		{"none", []string{"HOME=" + t.TempDir()}, "", gateway.ErrNoCredential},
		{"bedrock", []string{"CLAUDE_CODE_USE_BEDROCK=1", "ANTHROPIC_API_KEY=secret-value"}, "CLAUDE_CODE_USE_BEDROCK is set", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := gateway.CredentialFromEnv(tc.env)
			switch {
			case tc.err != nil:
				if !errors.Is(err, tc.err) {
					t.Fatalf("err %v, want %v", err, tc.err)
				}
				for _, v := range []string{"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"} {
					if !strings.Contains(err.Error(), v) {
						t.Fatalf("the error does not name %s: %v", v, err)
					}
				}
			case strings.HasSuffix(tc.want, "is set"):
				if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "secret-value") {
					t.Fatalf("err %v", err)
				}
			default:
				if err != nil || c.String() != tc.want {
					t.Fatalf("%q, %v; want %q", c.String(), err, tc.want)
				}
				if strings.Contains(c.String(), "access") || strings.Contains(c.String(), "=k") {
					t.Fatalf("String shows the secret: %q", c.String())
				}
			}
		})
	}
}

// writeLogin writes a `claude login` credentials file, with fields the
// gateway does not know.
func writeLogin(tb testing.TB, path, access, refresh string, expires time.Time) {
	tb.Helper()
	b, _ := json.Marshal(map[string]any{
		"claudeAiOauth": map[string]any{"accessToken": access, "refreshToken": refresh, "expiresAt": expires.UnixMilli(),
			"scopes": []string{"user:inference"}, "subscriptionType": "max"},
		"someOtherTool": map[string]any{"kept": true},
	})
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		tb.Fatal(err)
	}
}

// tokenEndpoint is a fake OAuth token endpoint: it trades refresh tokens
// it knows for new access tokens.
type tokenEndpoint struct {
	mu      sync.Mutex
	next    map[string][2]string // refresh token → new access and refresh tokens
	calls   atomic.Int64
	fail    atomic.Bool
	release chan struct{} // when set, each answer waits for it
	bad     []string
}

func (e *tokenEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e.calls.Add(1)
	var body struct {
		GrantType    string `json:"grant_type"`
		RefreshToken string `json:"refresh_token"`
		ClientID     string `json:"client_id"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || r.Method != http.MethodPost ||
		body.GrantType != "refresh_token" || body.ClientID != "9d1c250a-e61b-44d9-88ed-5944d1962f5e" {
		e.mu.Lock()
		e.bad = append(e.bad, r.Method+" "+body.GrantType+" "+body.ClientID)
		e.mu.Unlock()
		http.Error(w, `{"error":"invalid_request"}`, http.StatusBadRequest)
		return
	}
	if e.release != nil {
		<-e.release
	}
	e.mu.Lock()
	next, ok := e.next[body.RefreshToken]
	e.mu.Unlock()
	if !ok || e.fail.Load() {
		http.Error(w, `{"error":"invalid_grant"}`, http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"access_token": next[0], "refresh_token": next[1], "expires_in": 28800, "token_type": "Bearer"})
}

// A login file whose token is about to expire: the first requests wait
// for one refresh (the token endpoint is asked once however many wait),
// the file is rewritten (0600, the new tokens and expiry, every other
// field kept), and the API gets the new token with the OAuth beta flag.
// When another tool rewrites the file, its token is used from then on.
func TestLoginFileRefresh(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), ".claude", ".credentials.json")
	writeLogin(t, path, "old-access", "old-refresh", time.Now().Add(30*time.Second))
	endpoint := &tokenEndpoint{next: map[string][2]string{"old-refresh": {"new-access", "new-refresh"}}, release: make(chan struct{})}
	tokens := httptest.NewServer(endpoint)
	defer tokens.Close()

	model := scriptedmodel.New(scriptedmodel.Script)
	model.RequireKey("new-access")
	upstream := &upstreamLog{next: model}
	up := httptest.NewServer(upstream)
	defer up.Close()
	cred, err := gateway.CredentialFromEnv([]string{"HOME=" + filepath.Dir(filepath.Dir(path))})
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(gateway.Config{Upstream: up.URL, Credential: cred, OAuthTokenURL: tokens.URL, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	srv := httptest.NewServer(gw)
	defer srv.Close()
	token := gw.Issue("sebastian", "chat-9")

	const n = 4
	statuses := make(chan int, n)
	for range n {
		go func() {
			req, _ := http.NewRequest("GET", srv.URL+"/v1/models", nil)
			req.Header.Set("x-api-key", token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				statuses <- 0
				return
			}
			resp.Body.Close()
			statuses <- resp.StatusCode
		}()
	}
	close(endpoint.release)
	for range n {
		if s := <-statuses; s != 200 {
			t.Fatalf("status %d", s)
		}
	}
	if c := endpoint.calls.Load(); c != 1 || len(endpoint.bad) > 0 {
		t.Fatalf("%d refreshes (bad: %v), want 1", c, endpoint.bad)
	}
	for _, r := range upstream.all() {
		if r.Header.Get("Authorization") != "Bearer new-access" || r.Header.Get("anthropic-beta") != "oauth-2025-04-20" || r.Header.Get("x-api-key") != "" {
			t.Fatalf("upstream headers %v", r.Header)
		}
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("the login file is %v", st.Mode().Perm())
	}
	var file struct {
		OAuth struct {
			AccessToken      string   `json:"accessToken"`
			RefreshToken     string   `json:"refreshToken"`
			ExpiresAt        int64    `json:"expiresAt"`
			Scopes           []string `json:"scopes"`
			SubscriptionType string   `json:"subscriptionType"`
		} `json:"claudeAiOauth"`
		Other map[string]bool `json:"someOtherTool"`
	}
	b, _ := os.ReadFile(path)
	if err := json.Unmarshal(b, &file); err != nil {
		t.Fatal(err)
	}
	o := file.OAuth
	expires := time.UnixMilli(o.ExpiresAt)
	if o.AccessToken != "new-access" || o.RefreshToken != "new-refresh" || len(o.Scopes) != 1 || o.SubscriptionType != "max" || !file.Other["kept"] ||
		expires.Before(time.Now().Add(7*time.Hour)) || expires.After(time.Now().Add(9*time.Hour)) {
		t.Fatalf("login file after the refresh: %s", b)
	}

	// Another tool refreshed the login: its token is used.
	writeLogin(t, path, "external-access", "external-refresh", time.Now().Add(time.Hour))
	model.RequireKey("external-access")
	if s := do(t, "GET", srv.URL+"/v1/models", "x-api-key", token, "").status; s != 200 {
		t.Fatalf("after the file changed: %d", s)
	}
	if c := endpoint.calls.Load(); c != 1 {
		t.Fatalf("%d refreshes, want 1", c)
	}
}

// A token that cannot be refreshed: while it has not expired it is still
// used; once it has, requests get 401 and nothing goes upstream.
func TestLoginFileRefreshFails(t *testing.T) {
	t.Parallel()
	endpoint := &tokenEndpoint{}
	endpoint.fail.Store(true)
	tokens := httptest.NewServer(endpoint)
	defer tokens.Close()
	for _, tc := range []struct {
		name    string
		expires time.Duration
		status  int
	}{
		{"about to expire", 30 * time.Second, 200},
		{"expired", -time.Minute, 401},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), ".credentials.json")
			writeLogin(t, path, "old-access", "old-refresh", time.Now().Add(tc.expires))
			model := scriptedmodel.New(scriptedmodel.Script)
			model.RequireKey("old-access")
			upstream := &upstreamLog{next: model}
			up := httptest.NewServer(upstream)
			defer up.Close()
			gw, err := gateway.New(gateway.Config{Upstream: up.URL, Credential: gateway.LoginFile(path), OAuthTokenURL: tokens.URL, Logger: zerolog.Nop()})
			if err != nil {
				t.Fatal(err)
			}
			defer gw.Close()
			srv := httptest.NewServer(gw)
			defer srv.Close()
			resp := do(t, "GET", srv.URL+"/v1/models", "x-api-key", gw.Issue("petra", "x"), "")
			if resp.status != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.status, tc.status, resp.body)
			}
			if forwarded := len(upstream.all()) > 0; forwarded != (tc.status == 200) {
				t.Fatalf("forwarded: %v", forwarded)
			}
			if strings.Contains(resp.body, "old-refresh") || strings.Contains(resp.body, "old-access") {
				t.Fatalf("the answer shows a token: %s", resp.body)
			}
		})
	}
}
