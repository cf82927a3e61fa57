package vault_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/majorhq/major/vault"
)

func TestCheckPerson(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		valid    bool
		reserved bool
	}{
		{"sebastian", true, false},
		{"petra-2", true, false},
		{"a_b", true, false},
		{vault.AuditDir, true, true},
		{"", false, false},
		{".", false, false},
		{"..", false, false},
		{".hidden", false, false},
		{"Sebastian", false, false},
		{"a/b", false, false},
		{`a\b`, false, false},
		{"a\x00", false, false},
		{"2fast", false, false},
		{strings.Repeat("a", 65), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := vault.ValidPerson(tc.name); got != tc.valid {
				t.Errorf("ValidPerson = %v", got)
			}
			err := vault.CheckPerson(tc.name)
			if (err == nil) != (tc.valid && !tc.reserved) {
				t.Errorf("CheckPerson = %v", err)
			}
			if !tc.valid && !errors.Is(err, vault.ErrPersonName) {
				t.Errorf("CheckPerson = %v, want ErrPersonName", err)
			}
		})
	}
}

// TestAuditLogAppend: a new log starts with its header, an unterminated
// last line is ended before the next entry, each entry is its own commit,
// and nothing outside the audit folder is written.
func TestAuditLogAppend(t *testing.T) {
	t.Parallel()
	root := newRepo(t)
	l := vault.NewAuditLog(root, newGitSync(t, vault.GitConfig{Root: root}))
	rel := vault.AuditDir + "/test_logs/log.md"
	ctx := context.Background()
	if err := l.Append(ctx, vault.Entry{Log: rel, Header: "# Log\n\n", Line: "- one\n", Message: "one\nentry"}); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(root, rel), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString("- cut")
	_ = f.Close()
	if err := l.Append(ctx, vault.Entry{Log: rel, Header: "# Log\n\n", Line: "- two\n", Message: "two"}); err != nil {
		t.Fatal(err)
	}
	if got, want := readFile(t, filepath.Join(root, rel)), "# Log\n\n- one\n- cut\n- two\n"; got != want {
		t.Fatalf("log = %q, want %q", got, want)
	}
	if got := git(t, root, "log", "--format=%s", "--", rel); got != "two\none entry" {
		t.Fatalf("commits = %q", got)
	}
	for _, bad := range []string{"sebastian/log.md", vault.AuditDir + "/../sebastian/log.md", "/tmp/log.md", vault.AuditDir} {
		if err := l.Append(ctx, vault.Entry{Log: bad, Line: "- x\n", Message: "x"}); err == nil {
			t.Errorf("appended to %q", bad)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "sebastian")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("wrote outside the audit folder: %v", err)
	}
}
