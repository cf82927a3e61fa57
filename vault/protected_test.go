package vault

import "testing"

func TestProtectedName(t *testing.T) {
	t.Parallel()
	cases := []struct {
		el, want string
	}{
		{"CLAUDE.md", "claude.md"},
		{"claude.md", "claude.md"},
		{"Claude.MD", "claude.md"},
		{"CLAUDE.local.md", "claude.local.md"},
		{"claude.LOCAL.md", "claude.local.md"},
		{".claude", ".claude"},
		{".Claude", ".claude"},
		{".mcp.json", ".mcp.json"},
		{".MCP.json", ".mcp.json"},
		{".git", ".git"},
		{".GIT", ".git"},
		{".gitignore", ".gitignore"},
		{".GitAttributes", ".gitattributes"},
		{".gitmodules", ".gitmodules"},
		// Trailing dots and spaces.
		{"CLAUDE.md.", "claude.md"},
		{"CLAUDE.md ", "claude.md"},
		{"CLAUDE.md. . .", "claude.md"},
		{".git.", ".git"},
		{".gitignore\u3000", ".gitignore"}, // ideographic space
		// NTFS streams.
		{"CLAUDE.md::$DATA", "claude.md"},
		{".git::$INDEX_ALLOCATION", ".git"},
		{".claude:x", ".claude"},
		{"CLAUDE.md . ::$DATA", "claude.md"},
		// Ignorable characters.
		{"CLAUDE\u200d.md", "claude.md"},
		{".g\u200cit", ".git"},
		{"\ufeff.git", ".git"},
		{".g\u00adit", ".git"},
		{".gi\u200et", ".git"},
		{".git\u206a", ".git"},
		{".cla\ufe0fude", ".claude"},
		// Unicode case and compatibility forms.
		{"\uff23\uff2c\uff21\uff35\uff24\uff25.md", "claude.md"}, // fullwidth
		{"CLAUDE\uff0emd", "claude.md"},                          // fullwidth full stop
		{".mcp.j\u017fon", ".mcp.json"},                          // long s
		{".g\u0131t", ".git"},                                    // dotless i
		{".G\u0130T", ".git"},                                    // dotted capital I
		{".g\u0130t", ".git"},
		{"\u1d9c\u02e1a\u1d58\u1d48\u1d49.md", "claude.md"}, // modifier letters
		// 8.3 short names.
		{"GIT~1", ".git"},
		{"git~4", ".git"},
		{"GIT~1.", ".git"},
		{"CLAUDE~1", ".claude"},
		{"CLAUDE~1.MD", "claude.md"},
		{"CLAUDE~2.MD", "claude.md"},
		{"CL1A2B~1.MD", "claude.md"},
		{"C7F3A~1", ".claude"},
		{"MCP~1.JSO", ".mcp.json"},
		{"GITIGN~1", ".gitignore"},
		{"GITATT~1", ".gitattributes"},
		{"GITMOD~1", ".gitmodules"},
		{"GI9D0F~1", ".git"},
		{"GIT~1::$DATA", ".git"},
		// Not protected.
		{"notes.md", ""},
		{"claude", ""},
		{"claude.txt", ""},
		{"CLAUDE.md.bak", ""},
		{"CLAUDE.mdx", ""},
		{"my-CLAUDE.md", ""},
		{".github", ""},
		{".gitkeep", ""},
		{".git-notes", ""},
		{".claude-notes", ""},
		{"git", ""},
		{"GIT~1.MD", ""},
		{"CLAUDE~1.TXT", ""},
		{"NOTES~1.MD", ""},
		{"CAFE~1.MD", ""},
		{"C0FFEE~1.MD", ""},
		{"GIT~X", ""},
		{"~1", ""},
		{"git~", ""},
		{"", ""},
		{"\u200d", ""},
		{"clau\u0301de.md", ""},
	}
	for _, tc := range cases {
		t.Run(tc.el, func(t *testing.T) {
			if got := protectedName(tc.el); got != tc.want {
				t.Fatalf("protectedName(%+q) = %q, want %q", tc.el, got, tc.want)
			}
		})
	}
}

func TestProtectedPath(t *testing.T) {
	t.Parallel()
	cases := []struct {
		rel, elem, name string
	}{
		{"notes/a.md", "", ""},
		{"sub/.CLAUDE/settings.json", ".CLAUDE", ".claude"},
		{`sub\.claude\settings.json`, ".claude", ".claude"},
		{`.git\config`, ".git", ".git"},
		{"a/b/c/.gitignore", ".gitignore", ".gitignore"},
		{"../x/GIT~1/config", "GIT~1", ".git"},
		{"x/CLAUDE.md/y", "CLAUDE.md", "claude.md"},
	}
	for _, tc := range cases {
		t.Run(tc.rel, func(t *testing.T) {
			elem, name := protectedPath(tc.rel)
			if elem != tc.elem || name != tc.name {
				t.Fatalf("protectedPath(%q) = %q, %q; want %q, %q", tc.rel, elem, name, tc.elem, tc.name)
			}
		})
	}
}
