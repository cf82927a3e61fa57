package hooks_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/majorhq/major/hooks"
)

// guardWorld is a vault root with two persons and the links a malicious
// turn might have planted; it returns the root and sebastian's vault.
func guardWorld(tb testing.TB) (string, string) {
	tb.Helper()
	root := tb.TempDir()
	outside := tb.TempDir()
	v := filepath.Join(root, "sebastian")
	writeFile(tb, filepath.Join(v, "notes.md"), "mine\n")
	writeFile(tb, filepath.Join(v, "sub", "a.md"), "a\n")
	writeFile(tb, filepath.Join(root, "petra", "secret.md"), "petra's secret\n")
	writeFile(tb, filepath.Join(outside, "x.md"), "outside\n")
	for link, target := range map[string]string{
		"outdir":   outside,
		"leak.md":  filepath.Join(root, "petra", "secret.md"),
		"dangling": filepath.Join(outside, "not-yet", "new.md"),
		"inner":    filepath.Join(v, "sub"),
	} {
		if err := os.Symlink(target, filepath.Join(v, link)); err != nil {
			tb.Fatal(err)
		}
	}
	return root, v
}

func TestGuardCheck(t *testing.T) {
	t.Parallel()
	root, v := guardWorld(t)
	g := hooks.Guard{VaultRoot: root}
	cases := []struct {
		name   string
		person string
		tool   string
		input  map[string]any
		allow  bool
	}{
		{"read inside", "", "Read", map[string]any{"file_path": "notes.md"}, true},
		{"read absolute inside", "", "Read", map[string]any{"file_path": filepath.Join(v, "notes.md")}, true},
		{"dotdot that stays inside", "", "Read", map[string]any{"file_path": "sub/../notes.md"}, true},
		{"write through a link that stays inside", "", "Write", map[string]any{"file_path": "inner/new.md"}, true},
		{"read settings", "", "Read", map[string]any{"file_path": ".claude/settings.json"}, true},
		{"absolute elsewhere", "", "Read", map[string]any{"file_path": "/etc/passwd"}, false},
		{"other person", "", "Read", map[string]any{"file_path": "../petra/secret.md"}, false},
		{"dotdot escape", "", "Read", map[string]any{"file_path": "sub/../../petra/secret.md"}, false},
		{"home", "", "Read", map[string]any{"file_path": "~/.ssh/id_rsa"}, false},
		{"file symlink out", "", "Read", map[string]any{"file_path": "leak.md"}, false},
		{"new file under symlinked dir", "", "Write", map[string]any{"file_path": "outdir/new.md"}, false},
		{"dangling symlink", "", "Write", map[string]any{"file_path": "dangling"}, false},
		{"write settings", "", "Write", map[string]any{"file_path": ".claude/settings.json"}, false},
		{"edit nested settings", "", "Edit", map[string]any{"file_path": "sub/.claude/settings.local.json"}, false},
		{"write mcp config", "", "Write", map[string]any{"file_path": ".mcp.json"}, false},
		{"multiedit CLAUDE.md", "", "MultiEdit", map[string]any{"file_path": "CLAUDE.md"}, false},
		{"notebook in .git", "", "NotebookEdit", map[string]any{"notebook_path": "sub/.git/x.ipynb"}, false},
		{"ls root", "", "LS", map[string]any{"path": "/"}, false},
		{"glob inside", "", "Glob", map[string]any{"pattern": "**/*.md"}, true},
		{"glob dotdot inside", "", "Glob", map[string]any{"pattern": "sub/../*.md"}, true},
		{"glob absolute elsewhere", "", "Glob", map[string]any{"pattern": "/etc/*"}, false},
		{"glob other person", "", "Glob", map[string]any{"pattern": "../petra/*.md"}, false},
		{"glob climbing after wildcard", "", "Glob", map[string]any{"pattern": "**/../../*"}, false},
		{"glob path elsewhere", "", "Glob", map[string]any{"pattern": "*", "path": "/etc"}, false},
		{"grep without path", "", "Grep", map[string]any{"pattern": "\\.\\./x"}, true},
		{"grep regex with dots", "", "Grep", map[string]any{"pattern": "..", "path": "sub"}, true},
		{"grep other person", "", "Grep", map[string]any{"pattern": "x", "path": "../petra"}, false},
		{"grep glob escaping", "", "Grep", map[string]any{"pattern": "x", "glob": "../../*"}, false},
		{"unknown tool with a path field", "", "mcp__x__export", map[string]any{"target_path": "/etc/passwd"}, false},
		{"unknown tool with a path list", "", "mcp__x__zip", map[string]any{"paths": []any{"notes.md", "/etc/passwd"}}, false},
		{"unknown tool without paths", "", "mcp__x__post", map[string]any{"text": "/etc/passwd"}, true},
		{"no person", "-", "Read", map[string]any{"file_path": "notes.md"}, false},
		{"person that climbs", "..", "Read", map[string]any{"file_path": "notes.md"}, false},
		{"petra reads her own", "petra", "Read", map[string]any{"file_path": filepath.Join(root, "petra", "secret.md")}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			person, cwd := "sebastian", v
			switch tc.person {
			case "-":
				person = ""
			case "":
			default:
				person, cwd = tc.person, filepath.Join(root, tc.person)
			}
			in, _ := json.Marshal(tc.input)
			reason := g.Check(person, cwd, tc.tool, in)
			if tc.allow && reason != "" {
				t.Fatalf("denied: %s", reason)
			}
			if !tc.allow && reason == "" {
				t.Fatal("allowed")
			}
		})
	}
}
