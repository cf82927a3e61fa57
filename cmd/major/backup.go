package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// backup is `major backup [--state-dir DIR] DEST`: a copy of the state
// directory, safe to take while the server runs. Every file the server
// replaces whole (index entries, usage, the ACME cache) is copied as one
// version or the other, never half; an append-only log (events, the
// CLI's transcripts) is copied up to its last complete line. So the copy
// is what a crash at that moment would have left, which the server
// starts from as it does after one. Left out: the server's process
// records (pids/, which a restored server would take for orphans to
// kill), its sockets and lock files.
func backup(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("major backup", flag.ContinueOnError)
	fs.SetOutput(stderr)
	state := fs.String("state-dir", "", "the state directory to copy (MAJOR_STATE_DIR; default $XDG_STATE_HOME/major or ~/.local/state/major)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "usage: major backup [--state-dir DIR] DEST")
		return errors.New("backup needs one destination folder")
	}
	if *state == "" {
		*state = getenv("MAJOR_STATE_DIR")
	}
	if *state == "" {
		*state = defaultStateDir(getenv)
	}
	src, err := filepath.Abs(*state)
	if err != nil {
		return err
	}
	if st, err := os.Stat(src); err != nil || !st.IsDir() {
		return fmt.Errorf("state directory %s: not a directory", src)
	}
	dest, err := filepath.Abs(fs.Arg(0))
	if err != nil {
		return err
	}
	if rel, err := filepath.Rel(src, dest); err == nil && !strings.HasPrefix(rel, "..") {
		return fmt.Errorf("backup destination %s is inside the state directory", dest)
	}
	if _, err := os.Stat(dest); err == nil {
		return fmt.Errorf("backup destination %s exists; name a new folder", dest)
	}
	// Written beside its destination and renamed at the end: a folder of
	// that name is a whole backup.
	tmp, err := os.MkdirTemp(filepath.Dir(dest), "."+filepath.Base(dest)+".partial-")
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	defer os.RemoveAll(tmp)
	start := time.Now()
	files, bytesCopied, err := copyState(ctx, src, tmp)
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	if err := os.Rename(tmp, dest); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	fmt.Fprintf(stdout, "backed up %s to %s: %d files, %d bytes, in %d ms\n", src, dest, files, bytesCopied, time.Since(start).Milliseconds())
	return nil
}

// appendOnly reports whether a file of the state directory is a log that
// grows by whole lines while the server runs.
func appendOnly(name string) bool {
	return strings.HasSuffix(name, ".ndjson") || strings.HasSuffix(name, ".jsonl")
}

func copyState(ctx context.Context, src, dst string) (files int, size int64, err error) {
	err = filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed meanwhile (a session expired)
			}
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir() && rel == "pids":
			return filepath.SkipDir
		case d.IsDir():
			return os.MkdirAll(target, 0o700)
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			return os.Symlink(link, target)
		case !d.Type().IsRegular() || strings.HasSuffix(d.Name(), ".lock") || strings.HasPrefix(d.Name(), ".tmp-"):
			return nil // sockets, pipes, locks, replacements being written
		}
		n, err := copyFile(path, target, appendOnly(d.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		files++
		size += n
		return err
	})
	return files, size, err
}

// copyFile copies one file with its mode; with lines, only through its
// last newline.
func copyFile(src, dst string, lines bool) (int64, error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return 0, err
	}
	// Read once: a file replaced meanwhile stays the one opened.
	b, err := io.ReadAll(in)
	if err != nil {
		return 0, err
	}
	if lines {
		b = b[:bytes.LastIndexByte(b, '\n')+1]
	}
	if err := os.WriteFile(dst, b, st.Mode().Perm()); err != nil {
		return 0, err
	}
	return int64(len(b)), nil
}
