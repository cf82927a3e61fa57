// Package atomicfile replaces a file's content all at once: a reader sees
// the old content or the new, never a part, and after a crash the file is
// one of the two. It owns nothing else; it must not decide where files go.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write replaces path's content with b: a temporary file in the same
// folder (mode 0600) is written, synced and renamed over path, and the
// folder is synced so the rename survives a crash.
func Write(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	return SyncDir(filepath.Dir(path))
}

// SyncDir makes the entries of dir (a file made, renamed or removed in
// it) durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
