package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/majorhq/major/clitest"
)

// Without a credential the API accepts, the server says so at start and
// /readyz answers 503 with the reason; probes are answered from a cache, so
// however many there are, `claude --version` ran once for start-up and once
// for the check, and the API was asked at most once.
func TestReadyzNeedsACredentialAndStartsNothingPerProbe(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, key, require, reason string
		listings                   int64
	}{
		{name: "missing", key: "", reason: "no Anthropic credential is set"},
		{name: "refused", key: "test-key", require: "another-key", reason: "the model API refused the credential in ANTHROPIC_API_KEY (HTTP 401)", listings: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := clitest.New(t, nil)
			env.Model.RequireKey(tc.require)
			dir := t.TempDir()
			runs := filepath.Join(dir, "runs")
			wrapper := filepath.Join(dir, "claude")
			writeFile(t, wrapper, "#!/bin/sh\necho \"$*\" >> '"+runs+"'\nexec '"+env.Binary+"' \"$@\"\n")
			if err := os.Chmod(wrapper, 0o755); err != nil {
				t.Fatal(err)
			}
			authFile := filepath.Join(dir, "auth.json")
			writeFile(t, authFile, `{"tokens": {"`+testToken+`": ["sebastian"]}}`)
			state := filepath.Join(dir, "state")
			s := launch(t, env, nil, state, []string{"serve", "--addr", "127.0.0.1:0", "--vault-root", env.VaultRoot,
				"--state-dir", state, "--claude", wrapper, "--auth-file", authFile},
				testEnviron(env, "ANTHROPIC_API_KEY="+tc.key, "ANTHROPIC_AUTH_TOKEN=", "CLAUDE_CODE_OAUTH_TOKEN="))

			if logs := s.logs.String(); !strings.Contains(logs, "NOT READY") || !strings.Contains(logs, tc.reason) {
				t.Fatalf("start-up did not say it is not ready (%s):\n%s", tc.reason, logs)
			}
			for range 10 {
				resp, err := http.Get(s.url + "/readyz")
				if err != nil {
					t.Fatal(err)
				}
				var out map[string]string
				_ = json.Unmarshal([]byte(readAll(t, resp)), &out)
				if resp.StatusCode != http.StatusServiceUnavailable || out["status"] != "not ready" || !strings.Contains(out["error"], tc.reason) {
					t.Fatalf("readyz: %d %v, want 503 saying %q", resp.StatusCode, out, tc.reason)
				}
			}
			b, _ := os.ReadFile(runs)
			if n := strings.Count(string(b), "--version"); n != 2 {
				t.Fatalf("claude --version ran %d times for start-up and 10 probes, want 2:\n%s", n, b)
			}
			if n := env.Model.ModelListings(); n != tc.listings {
				t.Fatalf("the API was asked %d times, want %d", n, tc.listings)
			}
		})
	}
}
