package assembly

import (
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/majorhq/major/supervisor"
)

// Environment is the environment every CLI starts from, made of the
// server's own (server): only what configures the CLI, the locale and
// the way to the web, never a credential or a setting of the server's.
// The model is reached through the gateway at modelURL (none: no way to
// the model, the server has no credential); each process adds
// its own token (Spec.Credential) and its person's home (clihome.Env).
//
// Kept: PATH, SHELL, USER, LOGNAME, TERM, the locale (LANG, LANGUAGE,
// LC_*, TZ), the CLI's own settings (CLAUDE_CODE_*, DISABLE_*, the
// ANTHROPIC_* model names and betas, MAX_*, MCP_*, API_TIMEOUT_MS,
// BASH_*), proxies without a password in them, and the certificate
// files TLS needs (CertFiles says which to mount). Dropped: every name
// that says it holds a secret (KEY, TOKEN, SECRET, PASSWORD, CREDENTIAL,
// AUTH), ANTHROPIC_CUSTOM_HEADERS, MAJOR_*, the variables of an
// enclosing Claude Code, and everything else (cloud credentials, XDG
// folders of the server's, ...).
func Environment(server []string, modelURL string) []string {
	var out []string
	proxied := false
	for _, kv := range server {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !keepVar(k, v) {
			continue
		}
		if strings.EqualFold(k, "NO_PROXY") {
			continue
		}
		proxied = proxied || strings.HasSuffix(strings.ToUpper(k), "_PROXY")
		out = append(out, kv)
	}
	if proxied {
		// The gateway is on loopback: never through a proxy.
		noProxy := "127.0.0.1,localhost"
		for _, kv := range server {
			if k, v, _ := strings.Cut(kv, "="); strings.EqualFold(k, "NO_PROXY") && v != "" {
				noProxy = v + "," + noProxy
			}
		}
		out = append(out, "NO_PROXY="+noProxy, "no_proxy="+noProxy)
	}
	if modelURL == "" {
		return supervisor.CleanEnv(out)
	}
	return supervisor.CleanEnv(out, "ANTHROPIC_BASE_URL="+modelURL)
}

// CertFiles are the certificate files and folders env names, which a
// sandboxed CLI must be able to read.
func CertFiles(env []string) []string {
	var files []string
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if certVars[k] && v != "" {
			files = append(files, v)
		}
	}
	return files
}

var certVars = map[string]bool{"NODE_EXTRA_CA_CERTS": true, "SSL_CERT_FILE": true, "SSL_CERT_DIR": true}

func keepVar(k, v string) bool {
	upper := strings.ToUpper(k)
	for _, secret := range []string{"KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH"} {
		if strings.Contains(upper, secret) {
			return false
		}
	}
	switch k {
	case "PATH", "SHELL", "USER", "LOGNAME", "TERM", "COLORTERM", "NO_COLOR", "LANG", "LANGUAGE", "TZ",
		"API_TIMEOUT_MS", "NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE", "SSL_CERT_DIR",
		"ANTHROPIC_MODEL", "ANTHROPIC_SMALL_FAST_MODEL", "ANTHROPIC_BETAS":
		return true
	case "ANTHROPIC_CUSTOM_HEADERS", "ANTHROPIC_BASE_URL":
		return false
	case "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy":
		u, err := url.Parse(v)
		return err == nil && u.User == nil
	case "NO_PROXY", "no_proxy":
		return true
	}
	for _, prefix := range []string{"LC_", "CLAUDE_CODE_", "DISABLE_", "ANTHROPIC_DEFAULT_", "MAX_", "MCP_", "BASH_"} {
		if strings.HasPrefix(k, prefix) {
			return true
		}
	}
	return false
}

// mcpPaths are the files the owner's stdio MCP servers name: each
// command (an absolute path, or found on env's PATH) and what it links
// to, and every absolute path among the arguments (also as the value of
// a --flag=value). A sandboxed CLI can start them only if it can read
// them.
func mcpPaths(servers map[string]json.RawMessage, env []string) []string {
	path := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	var out []string
	add := func(p string) {
		if !filepath.IsAbs(p) {
			return
		}
		out = append(out, p)
		if real, err := filepath.EvalSymlinks(p); err == nil && real != p {
			out = append(out, real)
		}
	}
	names := make([]string, 0, len(servers))
	for name := range servers {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		var s struct {
			Command string   `json:"command"`
			Args    []string `json:"args"`
		}
		if json.Unmarshal(servers[name], &s) != nil || s.Command == "" {
			continue
		}
		if filepath.IsAbs(s.Command) {
			add(s.Command)
		} else if p := lookPath(s.Command, path); p != "" {
			add(p)
		}
		for _, a := range s.Args {
			if _, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(a, "-") {
				a = v
			}
			add(a)
		}
	}
	return out
}

// lookPath finds an executable name in the folders of path, as the CLI's
// exec would; "" if none.
func lookPath(name, path string) string {
	if strings.ContainsRune(name, filepath.Separator) {
		return ""
	}
	for _, dir := range filepath.SplitList(path) {
		if !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}
