package hooks_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/hooks"
	"github.com/majorhq/major/vault"
)

// TestWebLogDoesNotFollowLinks: a link anywhere on the way to an audit log
// (planted by a pulled commit) is not written through; the tool call goes
// on and the session is told the request went unrecorded.
func TestWebLogDoesNotFollowLinks(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		link, dest string // relative to the vault root
	}{
		{"audit folder", vault.AuditDir, "sebastian"},
		{"log folder", vault.AuditDir + "/webfetch_logs", "sebastian"},
		{"log file", hooks.WebFetchLogPath, "sebastian/notes.md"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			writeFile(t, filepath.Join(root, "sebastian", "notes.md"), "mine\n")
			if err := os.MkdirAll(filepath.Dir(filepath.Join(root, tc.link)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Join(root, tc.dest), filepath.Join(root, tc.link)); err != nil {
				t.Fatal(err)
			}
			h := hooks.New(hooks.Config{VaultRoot: root, Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.Disabled)})
			c := newCaller("s1", "sebastian")
			out, err := h.Handle(context.Background(), c, hookRequest(t, hooks.CallbackWebFetchLog, "WebFetch", map[string]any{"url": "https://example.com/"}))
			if err != nil || string(out) != `{"continue":true}` {
				t.Fatalf("answer = %s, %v", out, err)
			}
			entries, _ := os.ReadDir(filepath.Join(root, "sebastian"))
			if len(entries) != 1 || readFile(t, filepath.Join(root, "sebastian", "notes.md")) != "mine\n" {
				t.Fatalf("written through the link: %v", entries)
			}
			select {
			case n := <-c.notices:
				if !strings.Contains(n, "could not be updated") {
					t.Fatalf("notice = %q", n)
				}
			default:
				t.Fatal("no notice for the unrecorded request")
			}
		})
	}
}
