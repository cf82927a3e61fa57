// Package clitest sets up what a test needs to drive the real Claude Code
// CLI offline: the pinned binary, a scripted model on loopback, and a HOME
// and vault of the test's own, so tests can run in parallel.
package clitest

import (
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/gateway"
	"github.com/majorhq/major/sandbox"
	"github.com/majorhq/major/scriptedmodel"
	"github.com/majorhq/major/supervisor"
)

// Env is one test's world.
type Env struct {
	Binary    string
	Model     *scriptedmodel.Server
	ModelURL  string
	Home      string
	VaultRoot string
}

// New starts a scripted model answering with respond (nil: Script) and makes
// a fresh HOME and vault root (a git repository with the persons' folders
// sebastian and petra). Everything is removed when the test ends.
func New(tb testing.TB, respond scriptedmodel.Responder) *Env {
	tb.Helper()
	if respond == nil {
		respond = scriptedmodel.Script
	}
	model := scriptedmodel.New(respond)
	srv := httptest.NewServer(model)
	tb.Cleanup(srv.Close)
	e := &Env{
		Binary:    Binary(tb),
		Model:     model,
		ModelURL:  srv.URL,
		Home:      tb.TempDir(),
		VaultRoot: tb.TempDir(),
	}
	for _, p := range []string{"sebastian", "petra"} {
		if err := os.MkdirAll(filepath.Join(e.VaultRoot, p), 0o755); err != nil {
			tb.Fatal(err)
		}
	}
	if out, err := exec.Command("git", "init", "-q", "-b", "main", e.VaultRoot).CombinedOutput(); err != nil {
		tb.Fatalf("git init: %v: %s", err, out)
	}
	return e
}

// Vault is the folder of one person.
func (e *Env) Vault(person string) string { return filepath.Join(e.VaultRoot, person) }

// ChildEnv is the environment for a CLI process that talks to this test's
// model and keeps its state in this test's HOME.
func (e *Env) ChildEnv() []string {
	return supervisor.CleanEnv(os.Environ(),
		"HOME="+e.Home,
		"CLAUDE_CONFIG_DIR="+filepath.Join(e.Home, ".claude"),
		"ANTHROPIC_BASE_URL="+e.ModelURL,
		"ANTHROPIC_API_KEY=test-key",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
	)
}

// Binary finds the pinned claude binary: $MAJOR_CLAUDE, else the project's
// own install under .tools (made by `make claude`). A missing binary fails
// the test: the real-CLI tests are never skipped.
func Binary(tb testing.TB) string {
	tb.Helper()
	if p := os.Getenv("MAJOR_CLAUDE"); p != "" {
		return resolved(tb, p)
	}
	bin := filepath.Join(moduleRoot(tb), ".tools", "claude", "node_modules", ".bin", "claude")
	if _, err := os.Stat(bin); err != nil {
		tb.Fatalf("clitest: the claude CLI is not installed at %s: run `make claude` (scripts/install-claude.sh)", bin)
	}
	return resolved(tb, bin)
}

// moduleRoot is the folder of the project's go.mod, above the test's
// working directory.
func moduleRoot(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Fatal("clitest: no go.mod above the test's directory")
		}
		dir = parent
	}
}

// pin is how scripts/install-claude.sh names the version it installs.
var pin = regexp.MustCompile(`(?m)^version="\$\{CLAUDE_CODE_VERSION:-([0-9][0-9A-Za-z.+-]*)\}"$`)

// PinnedVersion is the CLI version scripts/install-claude.sh installs,
// the one place the version is named (e.g. "2.1.332").
func PinnedVersion(tb testing.TB) string {
	tb.Helper()
	script := filepath.Join(moduleRoot(tb), "scripts", "install-claude.sh")
	b, err := os.ReadFile(script)
	if err != nil {
		tb.Fatalf("clitest: %v", err)
	}
	m := pin.FindSubmatch(b)
	if m == nil {
		tb.Fatalf("clitest: %s names no version as version=\"${CLAUDE_CODE_VERSION:-X}\"", script)
	}
	return string(m[1])
}

// resolved is bin with its links followed: the binary a sandbox mounts
// (with its install) and runs.
func resolved(tb testing.TB, bin string) string {
	tb.Helper()
	real, err := filepath.EvalSymlinks(bin)
	if err != nil {
		tb.Fatalf("clitest: %v", err)
	}
	return real
}

// Sandbox is the command line that runs a CLI of person's in a sandbox,
// as the server runs it (package sandbox): the person's folder and the
// test's HOME writable, the CLI's install readable, nothing else of the
// test's world (the other person's folder, the vault's root).
func (e *Env) Sandbox(tb testing.TB, person string) []string {
	tb.Helper()
	sb, err := sandbox.New(context.Background(), sandbox.Config{Private: []string{e.VaultRoot},
		Limits: sandbox.DefaultLimits, Name: e.Home})
	if err != nil {
		tb.Fatalf("clitest: %v (scripts/install-bubblewrap.sh installs bubblewrap)", err)
	}
	install, err := sandbox.InstallDir(e.Binary)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(sb.Close)
	return sb.Command(sandbox.Box{Dir: e.Vault(person), Writable: []string{e.Home}, ReadOnly: []string{install}, Person: person})
}

// Gateway starts a model gateway (package gateway) on loopback in front of
// the test's model, as the server runs one, until the test ends. It
// returns the environment of a CLI that reaches the model only through
// it (ChildEnv without the API key, the gateway as ANTHROPIC_BASE_URL)
// and the Spec.Credential that gives each process a token of its own,
// revoked when the process is gone.
func (e *Env) Gateway(tb testing.TB) (env []string, credential func(session string) supervisor.Credential) {
	tb.Helper()
	gw, err := gateway.New(gateway.Config{Upstream: e.ModelURL, Credential: gateway.APIKey("test-key"), Logger: zerolog.Nop()})
	if err != nil {
		tb.Fatal(err)
	}
	url, err := gw.Listen("127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = gw.Close() })
	for _, kv := range e.ChildEnv() {
		if !strings.HasPrefix(kv, "ANTHROPIC_API_KEY=") && !strings.HasPrefix(kv, "ANTHROPIC_BASE_URL=") {
			env = append(env, kv)
		}
	}
	env = append(env, "ANTHROPIC_BASE_URL="+url)
	return env, func(session string) supervisor.Credential {
		token := gw.Issue("test", session)
		return supervisor.Credential{
			Env:    []string{"ANTHROPIC_AUTH_TOKEN=" + token},
			Bind:   func(session string) { gw.Bind(token, session) },
			Revoke: func() { gw.Revoke(token) },
		}
	}
}
