package vault_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/majorhq/major/vault"
)

// TestGuardDeniesTheAuditFolder: the audit logs sit next to the persons'
// folders, so no file tool of any person reaches them, by any spelling of
// the path.
func TestGuardDeniesTheAuditFolder(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	v := filepath.Join(root, "sebastian")
	logFile := filepath.Join(root, vault.AuditDir, "linkedin_logs", "sebastian.md")
	writeFile(t, logFile, "- entry\n")
	writeFile(t, filepath.Join(v, "notes.md"), "mine\n")
	// A link to the audit folder, as a pulled commit could carry one.
	if err := os.Symlink(filepath.Join(root, vault.AuditDir), filepath.Join(v, "logs")); err != nil {
		t.Fatal(err)
	}
	g := vault.Guard{VaultRoot: root}
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
