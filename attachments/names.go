package attachments

import (
	"fmt"
	"path"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/majorhq/major/vault"
)

// maxNameBytes is the longest file name most file systems take.
const maxNameBytes = 255

// CheckName returns nil when name can be an uploaded file's name in the
// vault as it is, and otherwise why not, naming the rule. A name is never
// changed to fit: a hostile one (a path, a dot file, a name that
// configures the assistant or git) is refused, so the person learns what
// was wrong and the vault gets only names they chose.
func CheckName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: a file has no name", ErrBadName)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: the name %q is not valid UTF-8", ErrBadName, name)
	case len(name) > maxNameBytes:
		return fmt.Errorf("%w: the name %q is longer than %d bytes", ErrBadName, name, maxNameBytes)
	case strings.ContainsAny(name, `/\`):
		return fmt.Errorf("%w: the name %q has a folder separator; send the file's own name", ErrBadName, name)
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return fmt.Errorf("%w: the name %q has a control character", ErrBadName, name)
	case strings.HasPrefix(name, "."):
		return fmt.Errorf("%w: the name %q starts with a dot", ErrBadName, name)
	case strings.TrimRight(name, ". ") != name || strings.TrimSpace(name) != name:
		return fmt.Errorf("%w: the name %q starts or ends with a space or ends with a dot", ErrBadName, name)
	case strings.Contains(name, ":"):
		// NTFS reads "x:y" as the stream y of x.
		return fmt.Errorf("%w: the name %q has a colon", ErrBadName, name)
	}
	if p := vault.ProtectedName(name); p != "" {
		return fmt.Errorf("%w: the name %q is read as %s, which configures the assistant or git", ErrBadName, name, p)
	}
	return nil
}

// withSuffix is name with " (n)" before its extension: the name of the
// n-th file of that name in one folder.
func withSuffix(name string, n int) string {
	ext := path.Ext(name)
	if ext == name {
		ext = ""
	}
	return fmt.Sprintf("%s (%d)%s", strings.TrimSuffix(name, ext), n, ext)
}
