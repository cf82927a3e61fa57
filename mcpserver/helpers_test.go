package mcpserver_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/linkedin"
	"github.com/majorhq/major/linkedin/linkedintest"
	"github.com/majorhq/major/mcpserver"
	"github.com/majorhq/major/vault"
)

var accounts = linkedin.Accounts{
	"sebastian": {AccessToken: "tok-sebastian-SECRET", Author: "urn:li:person:sebastian"},
	"petra":     {AccessToken: "tok-petra-SECRET", Author: "urn:li:person:petra"},
}

// newAuditLog is the vault's audit log at root, committed by a real git
// sync of repo.
func newAuditLog(tb testing.TB, root, repo string) *vault.AuditLog {
	tb.Helper()
	g := vault.NewGitSync(vault.GitConfig{Root: repo, Logger: zerolog.New(zerolog.NewTestWriter(tb)).Level(zerolog.WarnLevel)})
	tb.Cleanup(func() { _ = g.Close() })
	return vault.NewAuditLog(root, g)
}

func runGit(ctx context.Context, dir string, args ...string) error {
	full := append([]string{"-C", dir, "-c", "user.name=Major Test", "-c", "user.email=major@example.invalid", "-c", "commit.gpgsign=false"}, args...)
	out, err := exec.CommandContext(ctx, "git", full...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// newVault makes a vault root that is a git repository with one commit.
func newVault(tb testing.TB) string {
	tb.Helper()
	root := tb.TempDir()
	ctx := context.Background()
	if err := runGit(ctx, root, "init", "-q", "-b", "main"); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "README.md"), []byte("vault\n"), 0o644); err != nil {
		tb.Fatal(err)
	}
	if err := runGit(ctx, root, "add", "README.md"); err != nil {
		tb.Fatal(err)
	}
	if err := runGit(ctx, root, "commit", "-q", "-m", "init"); err != nil {
		tb.Fatal(err)
	}
	return root
}

// gitLog lists the commit subjects touching path (relative to root), newest
// first.
func gitLog(tb testing.TB, root, path string) []string {
	tb.Helper()
	out, err := exec.Command("git", "-C", root, "log", "--format=%s", "--", path).CombinedOutput()
	if err != nil {
		tb.Fatalf("git log: %v: %s", err, out)
	}
	s := strings.TrimSpace(string(out))
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func gitClean(tb testing.TB, root string) {
	tb.Helper()
	out, err := exec.Command("git", "-C", root, "status", "--porcelain").CombinedOutput()
	if err != nil || len(out) != 0 {
		tb.Fatalf("vault not clean after commits: %v: %s", err, out)
	}
}

type world struct {
	api   *linkedintest.Server
	vault string
	srv   *mcpserver.Server
}

var fixedNow = time.Date(2026, 1, 18, 14, 32, 15, 0, time.UTC)

// newWorld wires a Server to a fake LinkedIn knowing both persons' tokens
// and to a real git vault.
func newWorld(tb testing.TB, mutate func(*mcpserver.Config, *world)) *world {
	tb.Helper()
	w := &world{api: linkedintest.New(tb, linkedin.DefaultVersion), vault: newVault(tb)}
	for _, a := range accounts {
		w.api.AddAccount(a.AccessToken, a.Author)
	}
	client := linkedin.New(linkedin.Config{
		BaseURL: w.api.URL,
		Sleep:   func(ctx context.Context, _ time.Duration) error { return ctx.Err() },
		Logger:  zerolog.New(zerolog.NewTestWriter(tb)),
	})
	cfg := mcpserver.Config{
		LinkedIn:    client,
		Accounts:    accounts,
		ActivityLog: newAuditLog(tb, w.vault, w.vault),
		Now:         func() time.Time { return fixedNow },
		Logger:      zerolog.New(zerolog.NewTestWriter(tb)),
	}
	if mutate != nil {
		mutate(&cfg, w)
	}
	w.srv = mcpserver.New(cfg)
	return w
}

func (w *world) activity(tb testing.TB, person string) string {
	tb.Helper()
	data, err := os.ReadFile(filepath.Join(w.vault, mcpserver.ActivityLogPath(person)))
	if err != nil && !os.IsNotExist(err) {
		tb.Fatal(err)
	}
	return string(data)
}

func readFile(tb testing.TB, path string) string {
	tb.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return string(data)
}
