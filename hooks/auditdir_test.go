package hooks_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/hooks"
)

// TestGuardDeniesTheAuditFolder: the audit logs sit next to the persons'
// folders, so no file tool of any person reaches them, by any spelling of
// the path.
func TestGuardDeniesTheAuditFolder(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	v := filepath.Join(root, "sebastian")
	logFile := filepath.Join(root, hooks.AuditDir, "linkedin_logs", "sebastian.md")
	writeFile(t, logFile, "- entry\n")
	writeFile(t, filepath.Join(v, "notes.md"), "mine\n")
	// A link to the audit folder, as a pulled commit could carry one.
	if err := os.Symlink(filepath.Join(root, hooks.AuditDir), filepath.Join(v, "logs")); err != nil {
		t.Fatal(err)
	}
	g := hooks.Guard{VaultRoot: root}
	cases := []struct {
		tool  string
		input map[string]any
	}{
		{"Write", map[string]any{"file_path": "../claude/linkedin_logs/sebastian.md", "content": ""}},
		{"Write", map[string]any{"file_path": logFile, "content": "forged"}},
		{"Edit", map[string]any{"file_path": logFile, "old_string": "entry", "new_string": "forged"}},
		{"Write", map[string]any{"file_path": "../claude/webfetch_logs/requests.md", "content": ""}},
		{"Write", map[string]any{"file_path": "logs/linkedin_logs/sebastian.md", "content": ""}},
		{"Write", map[string]any{"file_path": "logs/new.md", "content": ""}},
		{"Write", map[string]any{"file_path": "sub/../../claude/x.md", "content": ""}},
		{"Read", map[string]any{"file_path": logFile}},
		{"Glob", map[string]any{"pattern": "../claude/**"}},
	}
	for _, tc := range cases {
		in, _ := json.Marshal(tc.input)
		if reason := g.Check("sebastian", v, tc.tool, in); reason == "" {
			t.Errorf("%s %s was allowed", tc.tool, in)
		}
	}
	if got := readFile(t, logFile); got != "- entry\n" {
		t.Fatalf("log = %q", got)
	}
}

// TestWebLogDoesNotFollowLinks: a link anywhere on the way to an audit log
// (planted by a pulled commit) is not written through; the tool call goes
// on and the session is told the request went unrecorded.
func TestWebLogDoesNotFollowLinks(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		link, dest string // relative to the vault root
	}{
		{"audit folder", hooks.AuditDir, "sebastian"},
		{"log folder", hooks.AuditDir + "/webfetch_logs", "sebastian"},
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
