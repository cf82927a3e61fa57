package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
)

// ErrNoCredential means the server's environment holds no Anthropic
// credential the gateway can use.
var ErrNoCredential = errors.New("no Anthropic credential is set (ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN, CLAUDE_CODE_OAUTH_TOKEN, or a `claude login` in $CLAUDE_CONFIG_DIR or ~/.claude)")

// oauthBeta is the beta flag the API requires with an OAuth token.
const oauthBeta = "oauth-2025-04-20"

type credentialKind int

const (
	kindNone credentialKind = iota
	kindAPIKey
	kindAuthToken
	kindOAuthToken
	kindLoginFile
)

// Credential is the server's Anthropic credential, the one the gateway
// puts on every request it forwards. Its String never shows the secret.
type Credential struct {
	kind   credentialKind
	secret string // the key or token; "" for a login file
	file   string // the login file's path
}

// APIKey is an API key, sent as x-api-key.
func APIKey(key string) Credential { return Credential{kind: kindAPIKey, secret: key} }

// AuthToken is a bearer token for a gateway or proxy in front of the API
// (ANTHROPIC_AUTH_TOKEN), sent as Authorization: Bearer.
func AuthToken(token string) Credential { return Credential{kind: kindAuthToken, secret: token} }

// OAuthToken is a Claude account's OAuth access token
// (CLAUDE_CODE_OAUTH_TOKEN, from `claude setup-token`), sent as
// Authorization: Bearer with the OAuth beta flag.
func OAuthToken(token string) Credential { return Credential{kind: kindOAuthToken, secret: token} }

// LoginFile is the credentials file of a `claude login`: its OAuth access
// token is sent as OAuthToken's is, and refreshed (and the file rewritten)
// when it expires.
func LoginFile(path string) Credential { return Credential{kind: kindLoginFile, file: path} }

// String names the credential's kind (and a login file's path), never its
// secret.
func (c Credential) String() string {
	switch c.kind {
	case kindAPIKey:
		return "API key"
	case kindAuthToken:
		return "auth token"
	case kindOAuthToken:
		return "OAuth token"
	case kindLoginFile:
		return "claude login file " + c.file
	}
	return "no credential"
}

// credentialVars are the variables a credential comes from, in the order
// they are looked at.
var credentialVars = []string{"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"}

// CredentialVars are the environment variables that carry an Anthropic
// credential: a CLI behind the gateway must inherit none of them (it gets
// its session token as ANTHROPIC_API_KEY instead).
func CredentialVars() []string { return append([]string(nil), credentialVars...) }

// CredentialFromEnv finds the credential in env (KEY=value pairs, a later
// one winning) the way the CLI does: ANTHROPIC_API_KEY, then
// ANTHROPIC_AUTH_TOKEN, then CLAUDE_CODE_OAUTH_TOKEN, then the login file
// ($CLAUDE_CONFIG_DIR/.credentials.json, else
// $HOME/.claude/.credentials.json). With none it returns ErrNoCredential;
// a cloud provider (Bedrock, Vertex, Foundry) is an error too, since the
// gateway speaks only the Anthropic API. Errors name variables, never
// values.
func CredentialFromEnv(env []string) (Credential, error) {
	vars := make(map[string]string, len(env))
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	for _, p := range []string{"CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX", "CLAUDE_CODE_USE_FOUNDRY"} {
		switch strings.ToLower(strings.TrimSpace(vars[p])) {
		case "1", "true", "yes", "on":
			return Credential{}, fmt.Errorf("%s is set: the model gateway speaks only the Anthropic API", p)
		}
	}
	for i, newCredential := range []func(string) Credential{APIKey, AuthToken, OAuthToken} {
		if v := vars[credentialVars[i]]; v != "" {
			return newCredential(v), nil
		}
	}
	dir := vars["CLAUDE_CONFIG_DIR"]
	if dir == "" && vars["HOME"] != "" {
		dir = filepath.Join(vars["HOME"], ".claude")
	}
	if dir != "" {
		p := filepath.Join(dir, ".credentials.json")
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Size() > 0 {
			return LoginFile(p), nil
		}
	}
	return Credential{}, ErrNoCredential
}

// authorizer gives the credential to put on a request going upstream.
type authorizer interface {
	authorize(ctx context.Context) (authHeader, error)
}

// authHeader is a credential as a header, with the OAuth beta flag when
// the API requires it.
type authHeader struct {
	name, value string
	oauth       bool
}

// set puts the credential on h.
func (a authHeader) set(h http.Header) {
	h.Set(a.name, a.value)
	if a.oauth {
		addBeta(h, oauthBeta)
	}
}

// static is a credential that never changes.
type static authHeader

func (s static) authorize(context.Context) (authHeader, error) { return authHeader(s), nil }

// addBeta adds flag to the anthropic-beta flags the CLI sent, once.
func addBeta(h http.Header, flag string) {
	var flags []string
	for _, v := range h.Values("anthropic-beta") {
		for _, f := range strings.Split(v, ",") {
			if f = strings.TrimSpace(f); f != "" && f != flag {
				flags = append(flags, f)
			}
		}
	}
	h.Set("anthropic-beta", strings.Join(append(flags, flag), ","))
}
