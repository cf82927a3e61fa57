package vault_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/majorhq/major/vault"
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
	writeFile(tb, filepath.Join(root, ".git", "config"), "[core]\n")
	for link, target := range map[string]string{
		"outdir":   outside,
		"leak.md":  filepath.Join(root, "petra", "secret.md"),
		"dangling": filepath.Join(outside, "not-yet", "new.md"),
		"inner":    filepath.Join(v, "sub"),
		// A harmless-looking name for the repository's own folder, and a
		// protected-looking name for an ordinary folder.
		"vcs":  filepath.Join(root, ".git"),
		".GIT": filepath.Join(v, "sub"),
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
	g := vault.Guard{VaultRoot: root}
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
		{"write claude.md", "", "Write", map[string]any{"file_path": "claude.md"}, false},
		{"write CLAUDE.md with a stream", "", "Write", map[string]any{"file_path": "CLAUDE.md::$DATA"}, false},
		{"edit short name of .git", "", "Edit", map[string]any{"file_path": "GIT~1/config"}, false},
		{"multiedit .MCP.json", "", "MultiEdit", map[string]any{"file_path": ".MCP.json", "edits": []any{}}, false},
		{"write backslashed settings", "", "Write", map[string]any{"file_path": `sub\.Claude\settings.json`}, false},
		{"write absolute .gitignore", "", "Write", map[string]any{"file_path": filepath.Join(v, "sub", ".gitignore")}, false},
		{"write .gitattributes", "", "Write", map[string]any{"file_path": ".gitattributes"}, false},
		{"write .gitmodules", "", "Write", map[string]any{"file_path": "sub/.GITMODULES"}, false},
		{"write through a link to .git", "", "Write", map[string]any{"file_path": "vcs/config"}, false},
		{"write through a link named .GIT", "", "Write", map[string]any{"file_path": ".GIT/a.md"}, false},
		{"write from a cwd below", "sebastian/sub", "Write", map[string]any{"file_path": "a.md"}, true},
		{"unknown tool writing settings", "", "mcp__x__save", map[string]any{"path": ".claude/settings.json"}, false},
		{"unknown tool writing CLAUDE.md", "", "mcp__x__save", map[string]any{"file_path": "Claude.md"}, false},
		{"unknown tool with a list", "", "mcp__x__zip", map[string]any{"paths": []any{"notes.md", ".gitignore"}}, false},
		{"unknown tool with a file field", "", "mcp__x__save", map[string]any{"filename": "CLAUDE.md"}, false},
		{"unknown tool with a destination", "", "mcp__x__copy", map[string]any{"from": "notes.md", "destination": ".GIT/x"}, false},
		{"unknown tool with an output file", "", "mcp__x__render", map[string]any{"output_file": ".gitattributes"}, false},
		{"unknown tool with a folder list", "", "mcp__x__sync", map[string]any{"folders": []any{"sub", "/etc"}}, false},
		{"unknown tool with an ordinary file", "", "mcp__x__save", map[string]any{"file": "notes.md", "text": "CLAUDE.md"}, true},
		{"read claude.md", "", "Read", map[string]any{"file_path": "Claude.md"}, true},
		{"read through a link named .GIT", "", "Read", map[string]any{"file_path": ".GIT/a.md"}, true},
		{"write an ordinary short-looking name", "", "Write", map[string]any{"file_path": "NOTES~1.MD"}, true},
		{"write a note named like the assistant", "", "Write", map[string]any{"file_path": "claude-notes.md"}, true},
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
				person, _, _ = strings.Cut(tc.person, "/")
				cwd = filepath.Join(root, tc.person)
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

func TestRewindableOnlyInsideThePersonsFolder(t *testing.T) {
	t.Parallel()
	root, v := guardWorld(t)
	g := vault.Guard{VaultRoot: root}
	got, err := g.Rewindable("sebastian", []string{filepath.Join(v, "sub", "a.md"), filepath.Join(v, "notes.md"), filepath.Join(v, "gone.md")})
	if err != nil || strings.Join(got, ",") != "gone.md,notes.md,sub/a.md" {
		t.Fatalf("files inside: %v, %v", got, err)
	}
	for _, bad := range []string{
		filepath.Join(root, "petra", "secret.md"),
		filepath.Join(v, "..", "petra", "secret.md"),
		filepath.Join(v, "leak.md"),
		filepath.Join(v, "outdir", "x.md"),
		filepath.Join(v, "vcs", "config"),
		filepath.Join(v, ".claude", "settings.json"),
		filepath.Join(v, "CLAUDE.md"),
		filepath.Join(v, "sub", ".gitattributes"),
		filepath.Join(root, "claude", "webfetch_logs", "requests.md"),
		v,
		"~/.bashrc",
	} {
		if got, err := g.Rewindable("sebastian", []string{filepath.Join(v, "notes.md"), bad}); err == nil {
			t.Errorf("%s may be rewound: %v", bad, got)
		}
	}
	if _, err := g.Rewindable("../petra", []string{filepath.Join(root, "petra", "secret.md")}); err == nil {
		t.Error("a bad person name rewinds")
	}
}
