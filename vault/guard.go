package vault

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// pathKeys are tool input fields that hold file or folder paths, for the
// built-in tools and for any other tool that uses the same names.
var pathKeys = map[string]bool{
	"file_path": true, "path": true, "notebook_path": true,
	"directory": true, "dir": true, "cwd": true, "folder": true,
	"directories": true, "dirs": true, "folders": true,
	"file": true, "files": true, "filename": true, "filenames": true,
	"dest": true, "destination": true, "target": true, "output": true,
}

// pathSuffixes end the names of other fields that hold paths
// (target_path, output_file, src_dir).
var pathSuffixes = []string{"path", "paths", "_file", "_files", "filename", "_dir", "_directory", "_folder"}

// writes reports whether a tool call with these input fields may change
// files in the vault: a tool not known to be read-only that names a path.
// The protected names follow it.
func writes(tool string, fields map[string]any) bool {
	return !readOnlyTools[tool] && len(pathsIn(fields)) > 0
}

// TouchesFiles reports whether a tool call with this raw input reads
// or writes files in the vault: a tool that names a path, or a search of
// the working folder. A read during a pull would see the work tree the
// autostash reset, and a write based on it would undo the person's
// edit; so the write leases follow it. An input that is not a JSON object
// touches nothing (the guard refuses it anyway).
func TouchesFiles(tool string, input json.RawMessage) bool {
	var fields map[string]any
	if json.Unmarshal(input, &fields) != nil {
		return false
	}
	return len(pathsIn(fields)) > 0 || searchTools[tool]
}

// searchTools search the working folder when they name no path.
var searchTools = map[string]bool{"Glob": true, "Grep": true, "LS": true}

// Guard decides whether a tool call stays inside one person's vault.
type Guard struct {
	// VaultRoot holds one folder per person.
	VaultRoot string
}

// Check returns "" when the call may run, or the reason it may not, which
// the model sees. cwd is the CLI's working directory from the hook input;
// relative paths resolve against it. Anything the guard cannot understand
// is refused.
func (g Guard) Check(person, cwd, tool string, input json.RawMessage) string {
	vault, err := g.Folder(person)
	if err != nil {
		return "Access denied: " + err.Error() + "."
	}
	if cwd == "" {
		cwd = vault
	}
	var fields map[string]any
	if len(input) > 0 && string(input) != "null" {
		if err := json.Unmarshal(input, &fields); err != nil {
			return "The tool input could not be checked against the vault boundary."
		}
	}
	if tool == "Glob" {
		if p, ok := fields["pattern"].(string); ok {
			if reason := g.checkGlob(vault, cwd, baseOf(fields, cwd), p); reason != "" {
				return reason
			}
		}
	}
	if tool == "Grep" {
		// Grep's pattern is a regular expression over file contents; its
		// glob field is what selects files.
		if p, ok := fields["glob"].(string); ok {
			if reason := g.checkGlob(vault, cwd, baseOf(fields, cwd), p); reason != "" {
				return reason
			}
		}
	}
	for _, p := range pathsIn(fields) {
		resolved, reason := g.resolve(vault, cwd, p)
		if reason != "" {
			return reason
		}
		if !writes(tool, fields) {
			continue
		}
		// Both the path as written and where it really lands: a link may
		// hide a protected name, and a name may only be protected as
		// written (a link called .GIT pointing to an ordinary folder is
		// still .git on a case-insensitive checkout).
		for _, rel := range []string{g.written(person, vault, cwd, p), relTo(vault, resolved)} {
			if el, name := protectedPath(rel); name != "" {
				return protectedReason(el, name)
			}
		}
	}
	return ""
}

func protectedReason(el, name string) string {
	if el == name {
		return fmt.Sprintf("Access denied: %s in the vault configures the assistant or git and cannot be written.", name)
	}
	return fmt.Sprintf("Access denied: %q in the vault is read as %s on some file systems, which configures the assistant or git; it cannot be written.", el, name)
}

// written is p as the tool input wrote it, relative to the vault when it
// is spelled as a path inside it, else p itself.
func (g Guard) written(person, vault, cwd, p string) string {
	if !filepath.IsAbs(p) {
		if c := filepath.Clean(cwd); c != vault && Within(vault, c) {
			return relTo(vault, c) + "/" + p
		}
		return p
	}
	for _, dir := range []string{vault, filepath.Join(g.VaultRoot, person)} {
		if c := filepath.Clean(p); Within(dir, c) {
			return relTo(dir, c)
		}
	}
	return p
}

// relTo is p relative to dir (both clean and absolute, p inside dir).
func relTo(dir, p string) string {
	rel, err := filepath.Rel(dir, p)
	if err != nil {
		return p
	}
	return rel
}

// Folder is the person's folder with symlinks resolved; an error when the
// name cannot be a person (CheckPerson) or the folder is missing.
func (g Guard) Folder(person string) (string, error) {
	if CheckPerson(person) != nil {
		return "", errors.New("the session has no valid person, so no vault to work in")
	}
	v, err := filepath.EvalSymlinks(filepath.Join(g.VaultRoot, person))
	if err != nil {
		return "", errors.New("the person's vault folder is missing")
	}
	return v, nil
}

// pathsIn returns every path-like field of a tool input: the known names,
// names with a path-like ending, and lists under such names.
func pathsIn(fields map[string]any) []string {
	var out []string
	for k, v := range fields {
		lk := strings.ToLower(k)
		if !pathKeys[lk] && !slices.ContainsFunc(pathSuffixes, func(suf string) bool { return strings.HasSuffix(lk, suf) }) {
			continue
		}
		switch v := v.(type) {
		case string:
			out = append(out, v)
		case []any:
			for _, e := range v {
				if s, ok := e.(string); ok {
					out = append(out, s)
				}
			}
		}
	}
	return out
}

// baseOf is the folder a Glob or Grep searches: its path, else cwd.
func baseOf(fields map[string]any, cwd string) string {
	if p, ok := fields["path"].(string); ok && p != "" && !strings.HasPrefix(p, "~") {
		if filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(cwd, p)
	}
	return cwd
}

// resolve makes p absolute and real (after .., relative-to-cwd and
// symlinks) and checks it is inside vault. It returns the resolved path or
// a reason for refusing.
func (g Guard) resolve(vault, cwd, p string) (string, string) {
	denied := fmt.Sprintf("Access denied: %q is outside your vault. Only files inside your own vault can be used.", p)
	if p == "" {
		return vault, ""
	}
	if strings.HasPrefix(p, "~") || strings.ContainsRune(p, 0) {
		// Home-relative paths point at the server account, never at a vault.
		return "", denied
	}
	abs := p
	if !filepath.IsAbs(abs) {
		abs = filepath.Join(cwd, abs)
	}
	real, err := RealPath(filepath.Clean(abs))
	if err != nil {
		return "", fmt.Sprintf("Access denied: %q cannot be resolved safely (%v).", p, errors.Unwrap(err))
	}
	if !Within(vault, real) {
		return "", denied
	}
	return real, ""
}

// checkGlob refuses a file pattern that reaches outside the vault: an
// absolute pattern whose fixed leading folders are outside, a "~" pattern,
// or ".." anywhere the search base plus the pattern would leave the vault.
// ".." after a wildcard is refused outright, since "**/.." can climb any
// number of levels.
func (g Guard) checkGlob(vault, cwd, base, pattern string) string {
	denied := fmt.Sprintf("Access denied: the pattern %q reaches outside your vault.", pattern)
	if strings.HasPrefix(pattern, "~") {
		return denied
	}
	if _, reason := g.resolve(vault, cwd, base); reason != "" {
		return reason
	}
	// Joined by hand: filepath.Join would clean "**/.." away before it is
	// seen.
	full := pattern
	if !filepath.IsAbs(full) {
		full = base + "/" + pattern
	}
	var fixed []string
	wild := false
	for _, el := range strings.Split(filepath.ToSlash(full), "/") {
		if strings.ContainsAny(el, "*?[{") {
			wild = true
		}
		if wild {
			if el == ".." {
				return denied
			}
			continue
		}
		fixed = append(fixed, el)
	}
	prefix := filepath.Clean("/" + strings.Join(fixed, "/"))
	if _, reason := g.resolve(vault, cwd, prefix); reason != "" {
		return denied
	}
	return ""
}

// ErrOutsideVault refuses a rewind that would change a file outside the
// person's folder, or one of its protected names.
var ErrOutsideVault = errors.New("the rewind would change files outside your vault; nothing was changed")

// Rewindable checks the files a rewind of person's session would restore
// (absolute paths, or relative to the person's folder, as the CLI names
// them): each must resolve inside the person's folder and none may be a
// protected name, the same rule a write by a tool meets. It returns them
// relative to the folder, sorted; ErrOutsideVault if any is not.
func (g Guard) Rewindable(person string, files []string) ([]string, error) {
	folder, err := g.Folder(person)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(files))
	for _, f := range files {
		real, reason := g.resolve(folder, folder, f)
		if reason != "" || real == folder {
			return nil, ErrOutsideVault
		}
		for _, rel := range []string{g.written(person, folder, folder, f), relTo(folder, real)} {
			if _, name := protectedPath(rel); name != "" {
				return nil, ErrOutsideVault
			}
		}
		out = append(out, filepath.ToSlash(relTo(folder, real)))
	}
	slices.Sort(out)
	return out, nil
}
