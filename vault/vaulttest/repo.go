// Package vaulttest makes the git repositories that tests of the vault
// and its hook callbacks run on: a repository, a bare remote it tracks,
// and another clone that moves the remote on; and a GitSync on them.
package vaulttest

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/vault"
)

// Git runs git in dir with a fixed identity and fails the test on error.
func Git(tb testing.TB, dir string, args ...string) string {
	tb.Helper()
	full := append([]string{"-c", "user.name=Test", "-c", "user.email=test@localhost", "-c", "commit.gpgsign=false"}, args...)
	cmd := exec.Command("git", full...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		tb.Fatalf("git %s in %s: %v: %s", strings.Join(args, " "), dir, err, out)
	}
	return strings.TrimSpace(string(out))
}

// NewRepo is an empty git repository on branch main.
func NewRepo(tb testing.TB) string {
	tb.Helper()
	root := tb.TempDir()
	Git(tb, root, "init", "-q", "-b", "main")
	return root
}

// WriteFile writes body to path, creating folders.
func WriteFile(tb testing.TB, path, body string) {
	tb.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		tb.Fatal(err)
	}
}

func ReadFile(tb testing.TB, path string) string {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

// WithRemote gives the repository at root a first commit and a bare remote
// it tracks, as a clone of a shared vault has; it returns the remote's path.
func WithRemote(tb testing.TB, root string) string {
	tb.Helper()
	remote := filepath.Join(tb.TempDir(), "vault.git")
	Git(tb, tb.TempDir(), "init", "-q", "--bare", "-b", "main", remote)
	WriteFile(tb, filepath.Join(root, "README.md"), "vault\n")
	Git(tb, root, "add", "README.md")
	Git(tb, root, "commit", "-q", "-m", "start")
	Git(tb, root, "remote", "add", "origin", remote)
	Git(tb, root, "push", "-q", "-u", "origin", "main")
	return remote
}

// OtherClone clones remote elsewhere, commits a file there and pushes it,
// as another machine syncing the vault would.
func OtherClone(tb testing.TB, remote, file string) {
	tb.Helper()
	dir := filepath.Join(tb.TempDir(), "other")
	Git(tb, tb.TempDir(), "clone", "-q", remote, dir)
	WriteFile(tb, filepath.Join(dir, file), "from elsewhere\n")
	Git(tb, dir, "add", file)
	Git(tb, dir, "commit", "-q", "-m", "elsewhere: "+file)
	Git(tb, dir, "push", "-q", "origin", "HEAD:main")
}

// NewGitSync is a GitSync on cfg that logs warnings to the test's log and
// is closed when the test ends.
func NewGitSync(tb testing.TB, cfg vault.GitConfig) *vault.GitSync {
	tb.Helper()
	cfg.Logger = zerolog.New(zerolog.NewTestWriter(tb)).Level(zerolog.WarnLevel)
	g := vault.NewGitSync(cfg)
	tb.Cleanup(func() { _ = g.Close() })
	return g
}

// SilentRemote is the address of a git remote (git://, on loopback) whose
// server accepts every connection and never answers, as a hung server
// does; accepted is how many connections it took. It is closed when the
// test ends.
func SilentRemote(tb testing.TB) (url string, accepted func() int) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	tb.Cleanup(func() {
		_ = ln.Close()
		<-done
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return "git://" + ln.Addr().String() + "/vault.git", func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(conns)
	}
}
