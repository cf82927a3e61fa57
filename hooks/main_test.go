package hooks_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/majorhq/major/hooks"
	"github.com/majorhq/major/vault"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}

// git runs git in dir with a fixed identity and fails the test on error.
func git(tb testing.TB, dir string, args ...string) string {
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

func newRepo(tb testing.TB) string {
	tb.Helper()
	root := tb.TempDir()
	git(tb, root, "init", "-q", "-b", "main")
	return root
}

// writeFile writes body to path, creating folders.
func writeFile(tb testing.TB, path, body string) {
	tb.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		tb.Fatal(err)
	}
}

func readFile(tb testing.TB, path string) string {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

// withRemote gives the repository at root a first commit and a bare remote
// it tracks, as a clone of a shared vault has; it returns the remote's path.
func withRemote(tb testing.TB, root string) string {
	tb.Helper()
	remote := filepath.Join(tb.TempDir(), "vault.git")
	git(tb, tb.TempDir(), "init", "-q", "--bare", "-b", "main", remote)
	writeFile(tb, filepath.Join(root, "README.md"), "vault\n")
	git(tb, root, "add", "README.md")
	git(tb, root, "commit", "-q", "-m", "start")
	git(tb, root, "remote", "add", "origin", remote)
	git(tb, root, "push", "-q", "-u", "origin", "main")
	return remote
}

// otherClone clones remote elsewhere, commits a file there and pushes it,
// as another machine syncing the vault would.
func otherClone(tb testing.TB, remote, file string) {
	tb.Helper()
	dir := filepath.Join(tb.TempDir(), "other")
	git(tb, tb.TempDir(), "clone", "-q", remote, dir)
	writeFile(tb, filepath.Join(dir, file), "from elsewhere\n")
	git(tb, dir, "add", file)
	git(tb, dir, "commit", "-q", "-m", "elsewhere: "+file)
	git(tb, dir, "push", "-q", "origin", "HEAD:main")
}

func newGitSync(tb testing.TB, cfg vault.GitConfig) *vault.GitSync {
	tb.Helper()
	cfg.Logger = zerolog.New(zerolog.NewTestWriter(tb)).Level(zerolog.WarnLevel)
	g := vault.NewGitSync(cfg)
	tb.Cleanup(func() { _ = g.Close() })
	return g
}

// fakeCaller is a session for Handle: it records notices.
type fakeCaller struct {
	id, person string
	notices    chan string
}

func newCaller(id, person string) *fakeCaller {
	return &fakeCaller{id: id, person: person, notices: make(chan string, 16)}
}

func (c *fakeCaller) ID() string      { return c.id }
func (c *fakeCaller) Person() string  { return c.person }
func (c *fakeCaller) Notice(t string) { c.notices <- t }

var _ hooks.Caller = (*fakeCaller)(nil)
