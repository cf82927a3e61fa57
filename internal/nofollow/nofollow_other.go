//go:build !unix

package nofollow

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
)

// OpenAppend opens root/rel for appending (and reading), creating the file
// with perm and its missing folders. Without openat, each element is
// checked with Lstat before it is used, inside an os.Root so that nothing
// can lead outside root even if an element changes between the check and
// the use.
func OpenAppend(root, rel string, perm os.FileMode) (*os.File, error) {
	parts, err := elements(rel)
	if err != nil {
		return nil, err
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	for i := range parts {
		p := path.Join(parts[:i+1]...)
		st, err := r.Lstat(p)
		switch {
		case err == nil && st.Mode()&fs.ModeSymlink != 0:
			return nil, &os.PathError{Op: "open", Path: rel, Err: fmt.Errorf("%s is a link", p)}
		case err == nil && i < len(parts)-1 && !st.IsDir():
			return nil, &os.PathError{Op: "open", Path: rel, Err: fmt.Errorf("%s is not a folder", p)}
		case err == nil && i == len(parts)-1 && !st.Mode().IsRegular():
			return nil, &os.PathError{Op: "open", Path: rel, Err: ErrNotRegular}
		case err != nil && i < len(parts)-1:
			if err := r.Mkdir(p, 0o755); err != nil && !os.IsExist(err) {
				return nil, err
			}
		}
	}
	return r.OpenFile(strings.Join(parts, "/"), os.O_RDWR|os.O_APPEND|os.O_CREATE, perm)
}
