//go:build unix

package nofollow_test

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/majorhq/major/internal/nofollow"
)

func appendTo(tb testing.TB, root, rel, text string) error {
	tb.Helper()
	f, err := nofollow.OpenAppend(root, rel, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(text); err != nil {
		_ = f.Close()
		tb.Fatal(err)
	}
	return f.Close()
}

func TestOpenAppendCreatesAndAppends(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	for _, s := range []string{"one\n", "two\n"} {
		if err := appendTo(t, root, "claude/logs/a.md", s); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(filepath.Join(root, "claude", "logs", "a.md"))
	if err != nil || string(data) != "one\ntwo\n" {
		t.Fatalf("file = %q, %v", data, err)
	}
}

// TestOpenAppendRefusesLinks plants a link at every element of the path in
// turn, pointing at a place the caller must never write: the open fails and
// the target is untouched.
func TestOpenAppendRefusesLinks(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		plant func(tb testing.TB, root, target string)
	}{
		{"top folder is a link", func(tb testing.TB, root, target string) {
			symlink(tb, target, filepath.Join(root, "claude"))
		}},
		{"inner folder is a link", func(tb testing.TB, root, target string) {
			mkdir(tb, filepath.Join(root, "claude"))
			symlink(tb, target, filepath.Join(root, "claude", "logs"))
		}},
		{"file is a link", func(tb testing.TB, root, target string) {
			mkdir(tb, filepath.Join(root, "claude", "logs"))
			symlink(tb, filepath.Join(target, "a.md"), filepath.Join(root, "claude", "logs", "a.md"))
		}},
		{"file is a dangling link", func(tb testing.TB, root, target string) {
			mkdir(tb, filepath.Join(root, "claude", "logs"))
			symlink(tb, filepath.Join(target, "new.md"), filepath.Join(root, "claude", "logs", "a.md"))
		}},
		{"relative link inside the root", func(tb testing.TB, root, target string) {
			mkdir(tb, filepath.Join(root, "claude"))
			symlink(tb, "../person", filepath.Join(root, "claude", "logs"))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			target := filepath.Join(root, "person")
			mkdir(t, target)
			if err := os.WriteFile(filepath.Join(target, "a.md"), []byte("mine\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			tc.plant(t, root, target)
			err := appendTo(t, root, "claude/logs/a.md", "forged\n")
			if err == nil {
				t.Fatal("opened through a link")
			}
			entries, _ := os.ReadDir(target)
			if len(entries) != 1 {
				t.Fatalf("something was created next to the target: %v", entries)
			}
			if data, _ := os.ReadFile(filepath.Join(target, "a.md")); string(data) != "mine\n" {
				t.Fatalf("target changed: %q", data)
			}
		})
	}
}

func TestOpenAppendRefusesOddPathsAndFiles(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	for _, rel := range []string{"", "/etc/passwd", "../x.md", "claude/../x.md", "claude//x.md", "./x.md"} {
		if err := appendTo(t, root, rel, "x"); !errors.Is(err, nofollow.ErrBadPath) {
			t.Errorf("%q: err = %v", rel, err)
		}
	}
	mkdir(t, filepath.Join(root, "claude"))
	if err := syscall.Mkfifo(filepath.Join(root, "claude", "fifo.md"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := appendTo(t, root, "claude/fifo.md", "x"); !errors.Is(err, nofollow.ErrNotRegular) {
		t.Errorf("fifo: err = %v", err)
	}
	if err := os.WriteFile(filepath.Join(root, "claude", "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := appendTo(t, root, "claude/file/x.md", "x"); err == nil {
		t.Error("a file was used as a folder")
	}
}

func symlink(tb testing.TB, target, link string) {
	tb.Helper()
	if err := os.Symlink(target, link); err != nil {
		tb.Fatal(err)
	}
}

func mkdir(tb testing.TB, dir string) {
	tb.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
}
