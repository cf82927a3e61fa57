package vault

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Reading a person's notes for a client (the notes panel, attachments
// read back, notes attached to a message) follows the guard's rule for the
// file tools: nothing outside the person's folder, and the names that
// configure the assistant or git are not there at all. Every open goes
// through an os.Root of the folder, so a link the agent planted (its
// sandbox writes the folder) can never lead the server outside it, even
// if it changes between a check and the open.

// ErrOutsideFolder is a path that leaves the person's folder.
var ErrOutsideFolder = errors.New("is outside your folder")

// ErrProtectedName is a path with a name that configures the assistant or
// git (ProtectedName).
var ErrProtectedName = errors.New("is not one of your notes")

// ProtectedName returns the protected name (.git, CLAUDE.md, ...) that the
// path element el stands for on some file system the vault may be checked
// out on, or "" when it stands for none.
func ProtectedName(el string) string { return protectedName(el) }

// DirEntry is one item of a folder listing.
type DirEntry struct {
	Name     string    `json:"name"`
	Type     string    `json:"type"` // file or folder
	Size     int64     `json:"size"`
	Modified time.Time `json:"modified"`
}

// CleanRel is rel, a path relative to a person's folder as a client gives
// it, made plain ("" and "." are the folder itself, as "."): an absolute
// path, one that climbs out with "..", or one with a NUL is
// ErrOutsideFolder; one naming a protected name is ErrProtectedName.
func CleanRel(rel string) (string, error) {
	if strings.ContainsRune(rel, 0) || strings.HasPrefix(rel, "~") || strings.HasPrefix(rel, "/") || strings.HasPrefix(rel, `\`) || filepath.IsAbs(rel) {
		return "", fmt.Errorf("%q %w", rel, ErrOutsideFolder)
	}
	clean := path.Clean("/" + strings.ReplaceAll(rel, `\`, "/"))
	// Cleaned against "/", a path that climbs stays at the root: compare
	// with the path cleaned on its own.
	if own := path.Clean(strings.ReplaceAll(rel, `\`, "/")); own == ".." || strings.HasPrefix(own, "../") {
		return "", fmt.Errorf("%q %w", rel, ErrOutsideFolder)
	}
	clean = strings.TrimPrefix(clean, "/")
	if clean == "" {
		return ".", nil
	}
	if el, _ := protectedPath(clean); el != "" {
		return "", fmt.Errorf("%q %w", rel, ErrProtectedName)
	}
	return clean, nil
}

// openRoot opens the person's folder as an os.Root.
func (g Guard) openRoot(person string) (*os.Root, error) {
	folder, err := g.Folder(person)
	if err != nil {
		return nil, err
	}
	return os.OpenRoot(folder)
}

// inFolder maps an error of an os.Root open to the guard's: a path that
// escapes through a link is outside the folder.
func inFolder(rel string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%q: %w", rel, fs.ErrNotExist)
	}
	var pe *fs.PathError
	if errors.As(err, &pe) && strings.Contains(pe.Err.Error(), "escapes") {
		return fmt.Errorf("%q %w", rel, ErrOutsideFolder)
	}
	return fmt.Errorf("open %q: %w", rel, err)
}

// List lists the folder rel of person's folder (CleanRel), folders first,
// then by name. Protected names are left out, and so are links that lead
// outside the folder or nowhere.
func (g Guard) List(person, rel string) (string, []DirEntry, error) {
	clean, err := CleanRel(rel)
	if err != nil {
		return "", nil, err
	}
	root, err := g.openRoot(person)
	if err != nil {
		return "", nil, err
	}
	defer root.Close()
	dir, err := root.Open(clean)
	if err != nil {
		return "", nil, inFolder(rel, err)
	}
	defer dir.Close()
	st, err := dir.Stat()
	if err != nil {
		return "", nil, inFolder(rel, err)
	}
	if !st.IsDir() {
		return "", nil, fmt.Errorf("%q: %w", rel, ErrNotFolder)
	}
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return "", nil, fmt.Errorf("list %q: %w", rel, err)
	}
	entries := make([]DirEntry, 0, len(names))
	for _, name := range names {
		if protectedName(name) != "" {
			continue
		}
		// Stat through the root: a link is followed only inside it.
		info, err := root.Stat(path.Join(clean, name))
		if err != nil {
			continue
		}
		e := DirEntry{Name: name, Type: "file", Size: info.Size(), Modified: info.ModTime().UTC()}
		switch {
		case info.IsDir():
			e.Type, e.Size = "folder", 0
		case !info.Mode().IsRegular():
			continue
		}
		entries = append(entries, e)
	}
	slices.SortFunc(entries, func(a, b DirEntry) int {
		if a.Type != b.Type {
			return strings.Compare(b.Type, a.Type) // folder before file
		}
		return strings.Compare(a.Name, b.Name)
	})
	return clean, entries, nil
}

// ErrNotFolder is a listing of something that is not a folder, and
// ErrNotFile a read of something that is not a regular file.
var (
	ErrNotFolder = errors.New("is not a folder")
	ErrNotFile   = errors.New("is not a file")
)

// Open opens the regular file rel of person's folder (CleanRel) for
// reading, with what Stat says of it.
func (g Guard) Open(person, rel string) (*os.File, fs.FileInfo, error) {
	clean, err := CleanRel(rel)
	if err != nil {
		return nil, nil, err
	}
	root, err := g.openRoot(person)
	if err != nil {
		return nil, nil, err
	}
	defer root.Close()
	f, err := root.Open(clean)
	if err != nil {
		return nil, nil, inFolder(rel, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, inFolder(rel, err)
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("%q %w", rel, ErrNotFile)
	}
	return f, st, nil
}
