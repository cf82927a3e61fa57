package vault

import (
	"strings"
	"unicode"

	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"
)

// protectedNames, in folded form, configure the assistant or git when they
// sit anywhere in the vault, so the model may read them but never write
// them:
//   - .claude/ holds settings (hooks, permissions, env), skills, agents and
//     commands, and .mcp.json declares MCP servers that run programs;
//     the CLI is started with flags that keep it from loading them, and
//     this keeps a session from planting them for a run without those
//     flags (a person's own Claude Code on a synced copy of the vault,
//     say).
//   - CLAUDE.md and CLAUDE.local.md become standing instructions the same
//     way.
//   - .git would turn a folder into a nested repository and its hooks run
//     code on git commands.
//   - .gitignore, .gitattributes and .gitmodules change what git records:
//     a "*" in .gitignore and nothing of the folder is committed or synced
//     again.
var protectedNames = []string{
	".claude", ".mcp.json", "claude.md", "claude.local.md",
	".git", ".gitignore", ".gitattributes", ".gitmodules",
}

// readOnlyTools never change a file. Every other tool that names a path,
// whatever it is called, is treated as one that writes there.
var readOnlyTools = map[string]bool{
	"Read": true, "Glob": true, "Grep": true, "LS": true, "NotebookRead": true,
	"WebFetch": true, "WebSearch": true, "AskUserQuestion": true,
}

// protectedPath returns the first element of the path rel that a file
// system could read as a protected name, and that name; "" when there is
// none. rel is split on both / and \, since a Windows checkout of the
// vault reads a backslash in a name as a folder separator.
func protectedPath(rel string) (elem, name string) {
	for _, el := range strings.FieldsFunc(rel, func(r rune) bool { return r == '/' || r == '\\' }) {
		if name := protectedName(el); name != "" {
			return el, name
		}
	}
	return "", ""
}

// protectedName returns the protected name the path element el stands for
// on some file system the vault may be checked out on, or "". It errs on
// the side of refusing: a name that only one rarely used file system reads
// as protected is still protected.
//
// The element is cut at ':' (NTFS reads "CLAUDE.md::$DATA" and
// "CLAUDE.md:x" as the file CLAUDE.md), loses the default-ignorable
// characters (HFS+ ignores zero-width joiners and the like), is compared
// under Unicode compatibility normalisation and full case folding, upper-
// and lowercased first as well (NTFS upcases "ı" to "I"), without trailing
// dots and spaces (Windows drops them), and as an 8.3 short name such as
// GIT~1 or CLAUDE~1.MD.
func protectedName(el string) string {
	el, _, _ = strings.Cut(el, ":")
	el = strings.Map(func(r rune) rune {
		if ignorable(r) {
			return -1
		}
		return r
	}, el)
	for _, form := range []string{el, strings.ToUpper(el), strings.ToLower(el)} {
		key := foldName(form)
		for _, p := range protectedNames {
			if key == p || shortNameFor(key, p) {
				return p
			}
		}
	}
	return ""
}

// foldName is s under compatibility normalisation and full case folding,
// without trailing dots and spaces.
func foldName(s string) string {
	s = norm.NFKC.String(cases.Fold().String(norm.NFKC.String(s)))
	return strings.TrimRightFunc(s, func(r rune) bool { return r == '.' || unicode.IsSpace(r) })
}

// ignorable reports a character file systems may drop from a name: format
// characters (zero-width joiners, direction marks, the byte order mark,
// the soft hyphen) and the other default-ignorable code points.
func ignorable(r rune) bool {
	return unicode.In(r, unicode.Cf, unicode.Other_Default_Ignorable_Code_Point, unicode.Variation_Selector)
}

// shortNameFor reports whether key (folded) is an 8.3 short name Windows
// may have given the protected name p: a base, "~", digits and an optional
// extension, where the base is a start of p's name without its leading
// dots (GIT~1 for .git), or its first one or two characters followed by
// four hex digits (the hashed form, CL1A2B~1.MD), and the extension a
// start of p's.
func shortNameFor(key, p string) bool {
	i := strings.LastIndex(key, "~")
	if i < 1 {
		return false
	}
	base, tail := key[:i], key[i+1:]
	digits, ext, _ := strings.Cut(tail, ".")
	if digits == "" || strings.Trim(digits, "0123456789") != "" {
		return false
	}
	stem, pext := strings.TrimLeft(p, "."), ""
	if j := strings.LastIndex(stem, "."); j >= 0 {
		stem, pext = stem[:j], stem[j+1:]
	}
	stem = strings.ReplaceAll(stem, ".", "")
	if !strings.HasPrefix(pext, ext) {
		return false
	}
	if strings.HasPrefix(stem, base) {
		return true
	}
	// The hashed form: one or two leading characters, four hex digits.
	k := len(base) - 4
	return (k == 1 || k == 2) && strings.HasPrefix(stem, base[:k]) && strings.Trim(base[k:], "0123456789abcdef") == ""
}
