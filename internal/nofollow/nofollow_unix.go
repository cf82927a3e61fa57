//go:build unix

package nofollow

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// OpenAppend opens root/rel for appending (and reading), creating the file
// with perm and its missing folders with 0755. root itself is trusted and
// may be a link; below it, every folder is opened with O_NOFOLLOW relative
// to the one before (openat), so a link at any element makes the open fail
// instead of leading elsewhere, and a folder swapped for a link between
// two steps is never entered. The file must be a regular file.
func OpenAppend(root, rel string, perm os.FileMode) (*os.File, error) {
	parts, err := elements(rel)
	if err != nil {
		return nil, err
	}
	dir, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: root, Err: err}
	}
	defer func() { _ = unix.Close(dir) }()
	for _, name := range parts[:len(parts)-1] {
		next, err := openDir(dir, name)
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: rel, Err: fmt.Errorf("folder %s: %w", name, err)}
		}
		_ = unix.Close(dir)
		dir = next
	}
	// O_NONBLOCK keeps a FIFO planted in place of the file from blocking
	// the open; it means nothing for a regular file.
	flags := unix.O_RDWR | unix.O_APPEND | unix.O_CREAT | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC
	fd, err := unix.Openat(dir, parts[len(parts)-1], flags, uint32(perm.Perm()))
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: rel, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		_ = unix.Close(fd)
		return nil, &os.PathError{Op: "stat", Path: rel, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		_ = unix.Close(fd)
		return nil, &os.PathError{Op: "open", Path: rel, Err: ErrNotRegular}
	}
	// Back to blocking mode, so the returned file behaves like any other.
	if err := unix.SetNonblock(fd, false); err != nil {
		_ = unix.Close(fd)
		return nil, &os.PathError{Op: "open", Path: rel, Err: err}
	}
	return os.NewFile(uintptr(fd), rel), nil
}

// openDir opens the folder name inside dir without following a link,
// creating it when it is missing.
func openDir(dir int, name string) (int, error) {
	const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := unix.Openat(dir, name, flags, 0)
	if errors.Is(err, unix.ENOENT) {
		if err := unix.Mkdirat(dir, name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			return -1, err
		}
		fd, err = unix.Openat(dir, name, flags, 0)
	}
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		return -1, fmt.Errorf("%w (a link or a file where a folder belongs)", err)
	}
	return fd, err
}
