// Package nofollow opens files below a trusted folder without following a
// symbolic link anywhere on the way. The server's audit logs live in the
// vault repository, where a pulled commit can turn any folder or file into
// a link; an append that followed it would write wherever the link points.
package nofollow

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// ErrBadPath is returned for a relative path that is absolute, empty, or
// climbs with "..".
var ErrBadPath = errors.New("not a plain relative path")

// ErrNotRegular is returned when the file to open exists but is not a
// regular file.
var ErrNotRegular = errors.New("not a regular file")

// elements splits rel (slash- or OS-separated) into its folder names and
// the file name, refusing anything that is not a plain downward path.
func elements(rel string) ([]string, error) {
	rel = filepath.ToSlash(rel)
	if rel == "" || strings.HasPrefix(rel, "/") || filepath.IsAbs(rel) {
		return nil, fmt.Errorf("%q: %w", rel, ErrBadPath)
	}
	parts := strings.Split(rel, "/")
	for _, p := range parts {
		if p == "" || p == "." || p == ".." || strings.ContainsRune(p, 0) {
			return nil, fmt.Errorf("%q: %w", rel, ErrBadPath)
		}
	}
	return parts, nil
}
