package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/internal/atomicfile"
)

// DefaultOAuthTokenURL is where Claude Code refreshes a login's token.
const DefaultOAuthTokenURL = "https://console.anthropic.com/v1/oauth/token"

// oauthClientID is Claude Code's OAuth client, the one a `claude login`
// token belongs to.
const oauthClientID = "9d1c250a-e61b-44d9-88ed-5944d1962f5e"

// Bounds of the login file's handling: a token is refreshed this long
// before it expires, and a refresh gives up after refreshTimeout.
const (
	refreshEarly   = time.Minute
	refreshTimeout = 30 * time.Second
	maxLoginFile   = 1 << 20
)

// ErrLogin means the login file's token cannot be used: the file is
// missing or broken, or its token expired and could not be refreshed.
var ErrLogin = errors.New("the claude login cannot be used")

// loginFile is a `claude login` credential: it reads the file when it
// changed on disk (another tool refreshed it), refreshes the token when it
// is about to expire and writes the file back. One refresh at a time: the
// lock is held while it runs, so a request that needs the token waits
// for the new one instead of starting another.
type loginFile struct {
	path     string
	tokenURL string
	client   *http.Client
	now      func() time.Time
	log      zerolog.Logger

	mu      sync.Mutex
	stat    os.FileInfo                // of the file the fields below came from
	doc     map[string]json.RawMessage // the whole file, unknown fields kept
	oauth   map[string]json.RawMessage // its claudeAiOauth object
	access  string
	refresh string
	expires time.Time // zero: the token does not say
}

func (l *loginFile) authorize(ctx context.Context) (authHeader, error) {
	token, err := l.token(ctx)
	if err != nil {
		return authHeader{}, err
	}
	return authHeader{name: "Authorization", value: "Bearer " + token, oauth: true}, nil
}

// token returns a usable access token, refreshing it first if it is about
// to expire.
func (l *loginFile) token(ctx context.Context) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.load(); err != nil {
		return "", err
	}
	now := l.now()
	if l.expires.IsZero() || now.Before(l.expires.Add(-refreshEarly)) {
		return l.access, nil
	}
	if err := l.renew(ctx); err != nil {
		if now.Before(l.expires) {
			l.log.Warn().Err(err).Str("file", l.path).Msg("could not refresh the claude login; using its token until it expires")
			return l.access, nil
		}
		return "", err
	}
	return l.access, nil
}

// load reads the file if it is not the one read last.
func (l *loginFile) load() error {
	st, err := os.Stat(l.path)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrLogin, err)
	}
	if l.stat != nil && os.SameFile(l.stat, st) && st.ModTime().Equal(l.stat.ModTime()) && st.Size() == l.stat.Size() {
		return nil
	}
	f, err := os.Open(l.path)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrLogin, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxLoginFile))
	if err != nil {
		return fmt.Errorf("%w: read %s: %w", ErrLogin, l.path, err)
	}
	var doc map[string]json.RawMessage
	var oauth map[string]json.RawMessage
	var fields struct {
		AccessToken  string `json:"accessToken"`
		RefreshToken string `json:"refreshToken"`
		ExpiresAt    int64  `json:"expiresAt"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("%w: %s is not JSON", ErrLogin, l.path)
	}
	if err := json.Unmarshal(doc["claudeAiOauth"], &oauth); err != nil || oauth == nil {
		return fmt.Errorf("%w: %s has no claudeAiOauth object", ErrLogin, l.path)
	}
	if err := json.Unmarshal(doc["claudeAiOauth"], &fields); err != nil || fields.AccessToken == "" {
		return fmt.Errorf("%w: %s has no access token", ErrLogin, l.path)
	}
	l.stat, l.doc, l.oauth = st, doc, oauth
	l.access, l.refresh = fields.AccessToken, fields.RefreshToken
	l.expires = time.Time{}
	if fields.ExpiresAt > 0 {
		l.expires = time.UnixMilli(fields.ExpiresAt)
	}
	return nil
}

// renew trades the refresh token for a new access token and writes the
// file back. It is bounded by refreshTimeout, not by the request that
// needed it: others wait for the same refresh.
func (l *loginFile) renew(ctx context.Context) error {
	if l.refresh == "" {
		return fmt.Errorf("%w: its token expired and %s has no refresh token", ErrLogin, l.path)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), refreshTimeout)
	defer cancel()
	body, err := json.Marshal(map[string]string{"grant_type": "refresh_token", "refresh_token": l.refresh, "client_id": oauthClientID})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.tokenURL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%w: token URL: %w", ErrLogin, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := l.client.Do(req)
	if err != nil {
		return fmt.Errorf("%w: refresh: %w", ErrLogin, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return fmt.Errorf("%w: refresh: %w", ErrLogin, err)
	}
	if resp.StatusCode != http.StatusOK {
		// The body is not shown: it may echo what was sent.
		return fmt.Errorf("%w: the token endpoint answered %d to the refresh", ErrLogin, resp.StatusCode)
	}
	var answer struct {
		AccessToken  string `json:"access_token"`
		RefreshToken string `json:"refresh_token"`
		ExpiresIn    int64  `json:"expires_in"`
	}
	if err := json.Unmarshal(b, &answer); err != nil || answer.AccessToken == "" {
		return fmt.Errorf("%w: the token endpoint's answer has no access token", ErrLogin)
	}
	l.access = answer.AccessToken
	if answer.RefreshToken != "" {
		l.refresh = answer.RefreshToken
	}
	l.expires = time.Time{}
	if answer.ExpiresIn > 0 {
		l.expires = l.now().Add(time.Duration(answer.ExpiresIn) * time.Second)
	}
	if err := l.save(); err != nil {
		// The new token works; the file keeps the old one, which the
		// refresh may have made useless, so this is worth an error.
		l.log.Error().Err(err).Str("file", l.path).Msg("refreshed the claude login but could not write it back")
	}
	return nil
}

// save writes the tokens into the file, every other field as it was.
func (l *loginFile) save() error {
	set := func(k string, v any) error {
		b, err := json.Marshal(v)
		l.oauth[k] = b
		return err
	}
	if err := errors.Join(set("accessToken", l.access), set("refreshToken", l.refresh)); err != nil {
		return err
	}
	if !l.expires.IsZero() {
		if err := set("expiresAt", l.expires.UnixMilli()); err != nil {
			return err
		}
	}
	oauth, err := json.Marshal(l.oauth)
	if err != nil {
		return err
	}
	l.doc["claudeAiOauth"] = oauth
	b, err := json.MarshalIndent(l.doc, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(l.path, b); err != nil {
		return fmt.Errorf("write %s: %w", l.path, err)
	}
	st, err := os.Stat(l.path)
	if err != nil {
		return err
	}
	l.stat = st
	return nil
}
