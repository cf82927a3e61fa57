// Package readiness answers whether the server can run a turn: the CLI
// binary runs and reports its version, and the CLI has an Anthropic
// credential that the API accepts. The answer is cached, so a readiness
// probe never starts a process or calls the API on every request.
//
// It only reads: it must not change the CLI's configuration or log in.
package readiness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Errors a check returns; callers test them with errors.Is.
var (
	ErrNoCredential      = errors.New("no Anthropic credential is set (ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN or CLAUDE_CODE_OAUTH_TOKEN)")
	ErrCredentialRefused = errors.New("the model API refused the credential")
	ErrAPIUnreachable    = errors.New("the model API cannot be reached")
	ErrCLI               = errors.New("the claude CLI does not run")
)

// DefaultBaseURL is the Anthropic API, unless ANTHROPIC_BASE_URL says
// otherwise.
const DefaultBaseURL = "https://api.anthropic.com"

// Config configures a Checker.
type Config struct {
	// Version runs the CLI and returns its version.
	Version func(ctx context.Context) (string, error)
	// Env is the CLI's environment: where its credential and API address
	// come from.
	Env []string
	// Client makes the credential check's request; default a client with
	// a 10 s timeout.
	Client *http.Client
	// TTL is how long a good answer is kept; default 5 minutes. A bad one
	// is kept for FailTTL (default 30 s), so a fixed problem shows soon.
	TTL     time.Duration
	FailTTL time.Duration
	Now     func() time.Time
	Logger  zerolog.Logger
}

// Checker runs the checks at most once per TTL, however many probes ask.
type Checker struct {
	cfg Config

	mu      sync.Mutex
	last    result
	expires time.Time
	running chan struct{} // closed when the check in flight ends
}

type result struct {
	version string
	err     error
}

// New returns a Checker; nothing runs until the first Check.
func New(cfg Config) *Checker {
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if cfg.TTL <= 0 {
		cfg.TTL = 5 * time.Minute
	}
	if cfg.FailTTL <= 0 {
		cfg.FailTTL = 30 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Checker{cfg: cfg}
}

// Check returns the CLI's version, or why the server cannot run turns. A
// cached answer is returned while it is fresh; concurrent callers share one
// check.
func (c *Checker) Check(ctx context.Context) (string, error) {
	for {
		c.mu.Lock()
		if !c.expires.IsZero() && c.cfg.Now().Before(c.expires) {
			r := c.last
			c.mu.Unlock()
			return r.version, r.err
		}
		if c.running != nil {
			wait := c.running
			c.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		done := make(chan struct{})
		c.running = done
		c.mu.Unlock()

		// The check finishes for the next caller even if this one gives up.
		r := c.check(context.WithoutCancel(ctx))
		c.mu.Lock()
		c.last = r
		ttl := c.cfg.TTL
		if r.err != nil {
			ttl = c.cfg.FailTTL
		}
		c.expires = c.cfg.Now().Add(ttl)
		c.running = nil
		close(done)
		c.mu.Unlock()
		return r.version, r.err
	}
}

func (c *Checker) check(ctx context.Context) result {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	version, err := c.cfg.Version(ctx)
	if err != nil {
		c.cfg.Logger.Error().Err(err).Msg("not ready: the claude CLI does not run")
		return result{err: ErrCLI}
	}
	if err := c.credential(ctx); err != nil {
		return result{version: version, err: err}
	}
	return result{version: version}
}

// credential finds the CLI's credential and asks the API whether it is
// good: GET /v1/models costs nothing and needs a valid one.
func (c *Checker) credential(ctx context.Context) error {
	env := lookup(c.cfg.Env)
	for _, p := range []string{"CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX", "CLAUDE_CODE_USE_FOUNDRY"} {
		if truthy(env[p]) {
			// A cloud provider's credentials come from its own chain;
			// the CLI finds out at the first turn.
			return nil
		}
	}
	base := strings.TrimRight(env["ANTHROPIC_BASE_URL"], "/")
	if base == "" {
		base = DefaultBaseURL
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/models?limit=1", nil)
	if err != nil {
		c.cfg.Logger.Error().Err(err).Str("base_url", base).Msg("not ready: ANTHROPIC_BASE_URL is not a URL")
		return fmt.Errorf("%w: ANTHROPIC_BASE_URL is not a URL", ErrAPIUnreachable)
	}
	req.Header.Set("anthropic-version", "2023-06-01")
	var name string
	switch {
	case env["ANTHROPIC_API_KEY"] != "":
		name = "ANTHROPIC_API_KEY"
		req.Header.Set("x-api-key", env[name])
	case env["ANTHROPIC_AUTH_TOKEN"] != "":
		name = "ANTHROPIC_AUTH_TOKEN"
		req.Header.Set("Authorization", "Bearer "+env[name])
	case env["CLAUDE_CODE_OAUTH_TOKEN"] != "":
		name = "CLAUDE_CODE_OAUTH_TOKEN"
		req.Header.Set("Authorization", "Bearer "+env[name])
		req.Header.Set("anthropic-beta", "oauth-2025-04-20")
	case loginFile(env) != "":
		// A `claude login` on this machine: the CLI refreshes it itself.
		return nil
	default:
		c.cfg.Logger.Error().Msg("not ready: " + ErrNoCredential.Error())
		return ErrNoCredential
	}
	resp, err := c.cfg.Client.Do(req)
	if err != nil {
		c.cfg.Logger.Error().Err(err).Str("base_url", base).Msg("not ready: the model API cannot be reached")
		return ErrAPIUnreachable
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		c.cfg.Logger.Error().Int("status", resp.StatusCode).Str("credential", name).Str("base_url", base).
			Msg("not ready: the model API refused the credential")
		return fmt.Errorf("%w in %s (HTTP %d)", ErrCredentialRefused, name, resp.StatusCode)
	case resp.StatusCode != http.StatusOK:
		// A gateway without /v1/models, or an API hiccup: that says
		// nothing against the credential.
		c.cfg.Logger.Warn().Int("status", resp.StatusCode).Str("base_url", base).
			Msg("could not verify the model API credential; assuming it is good")
	}
	return nil
}

// loginFile is the credentials file of a `claude login`, if there is one.
func loginFile(env map[string]string) string {
	dir := env["CLAUDE_CONFIG_DIR"]
	if dir == "" && env["HOME"] != "" {
		dir = filepath.Join(env["HOME"], ".claude")
	}
	if dir == "" {
		return ""
	}
	p := filepath.Join(dir, ".credentials.json")
	if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Size() > 0 {
		return p
	}
	return ""
}

// lookup turns KEY=value pairs into a map; a later pair wins, as in exec.
func lookup(env []string) map[string]string {
	m := make(map[string]string, len(env))
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

func truthy(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}
