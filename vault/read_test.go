package vault_test

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/majorhq/major/vault"
)

// TestReadStaysInTheFolder: listing and reading a person's notes follow
// the guard: another person's folder, a path that climbs, a link that
// leads out and the protected names are refused; each person sees only
// their own notes.
func TestReadStaysInTheFolder(t *testing.T) {
	t.Parallel()
	root := newRepo(t)
	writeFile(t, filepath.Join(root, "sebastian/notes/a.md"), "mine\n")
	writeFile(t, filepath.Join(root, "sebastian/CLAUDE.md"), "instructions\n")
	writeFile(t, filepath.Join(root, "petra/secret.md"), "hers\n")
	if err := os.Symlink(filepath.Join(root, "petra"), filepath.Join(root, "sebastian/petra-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("notes/a.md", filepath.Join(root, "sebastian/inside-link.md")); err != nil {
		t.Fatal(err)
	}
	g := vault.Guard{VaultRoot: root}

	clean, entries, err := g.List("sebastian", "")
	if err != nil || clean != "." {
		t.Fatal(clean, err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name+":"+e.Type)
	}
	if got := strings.Join(names, ","); got != "notes:folder,inside-link.md:file" {
		t.Fatalf("listing = %s", got)
	}
	if _, entries, _ := g.List("petra", "."); len(entries) != 1 || entries[0].Name != "secret.md" {
		t.Fatalf("petra's listing = %+v", entries)
	}

	for _, tc := range []struct {
		path string
		want error
	}{
		{"notes/a.md", nil},
		{"inside-link.md", nil},
		{"./notes/../notes/a.md", nil},
		{"../petra/secret.md", vault.ErrOutsideFolder},
		{"notes/../../petra/secret.md", vault.ErrOutsideFolder},
		{filepath.Join(root, "petra/secret.md"), vault.ErrOutsideFolder},
		{"~/x", vault.ErrOutsideFolder},
		{"petra-link/secret.md", vault.ErrOutsideFolder},
		{"CLAUDE.md", vault.ErrProtectedName},
		{"notes/.GIT/config", vault.ErrProtectedName},
		{"missing.md", fs.ErrNotExist},
		{"notes", vault.ErrNotFile},
		{"a\x00b", vault.ErrOutsideFolder},
	} {
		t.Run(tc.path, func(t *testing.T) {
			f, _, err := g.Open("sebastian", tc.path)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Open = %v, want %v", err, tc.want)
			}
			if err != nil {
				return
			}
			defer f.Close()
			if b, _ := io.ReadAll(f); string(b) != "mine\n" {
				t.Fatalf("read %q", b)
			}
		})
	}
	if _, _, err := g.List("sebastian", "petra-link"); !errors.Is(err, vault.ErrOutsideFolder) {
		t.Fatalf("listing through a link out: %v", err)
	}
	if _, _, err := g.List("sebastian", "notes/a.md"); !errors.Is(err, vault.ErrNotFolder) {
		t.Fatalf("listing a file: %v", err)
	}
}

// TestCommitFilesAndDiff: the files a commit changed in a person's
// folder and its diff, relative to the folder, binary files named only,
// another person's changes in the same commit left out.
func TestCommitFilesAndDiff(t *testing.T) {
	t.Parallel()
	root := newRepo(t)
	g := newGitSync(t, vault.GitConfig{Root: root})
	ctx := context.Background()
	if head, err := g.SessionHead(ctx, "s1", time.Time{}); err != nil || head != "" {
		t.Fatalf("no commit yet: %q %v", head, err)
	}
	writeFile(t, filepath.Join(root, "sebastian/old.md"), "one\ntwo\n")
	writeFile(t, filepath.Join(root, "sebastian/gone.md"), "bye\n")
	if err := g.Commit(ctx, "Session s0: first", "sebastian/"); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "sebastian/old.md"), "one\n2\nthree\n")
	writeFile(t, filepath.Join(root, "sebastian/new note.md"), "hello\n")
	writeFile(t, filepath.Join(root, "sebastian/pic.bin"), "\x00\x01\x02")
	writeFile(t, filepath.Join(root, "petra/hers.md"), "hers\n")
	if err := os.Remove(filepath.Join(root, "sebastian/gone.md")); err != nil {
		t.Fatal(err)
	}
	if err := g.Commit(ctx, "Session s1: changes", "sebastian/", "petra/"); err != nil {
		t.Fatal(err)
	}
	head, err := g.SessionHead(ctx, "s1", time.Now().Add(-time.Hour))
	if err != nil || len(head) != 40 {
		t.Fatalf("head %q %v", head, err)
	}
	if other, _ := g.SessionHead(ctx, "s0", time.Time{}); other == head || other == "" {
		t.Fatalf("s0's head %q", other)
	}
	if later, _ := g.SessionHead(ctx, "s1", time.Now().Add(time.Hour)); later != "" {
		t.Fatalf("a session started after the commit has head %q", later)
	}
	files, err := g.CommitFiles(ctx, "sebastian", head)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range files {
		got = append(got, f.Path+" "+f.Status+" +"+itoa(f.Insertions)+" -"+itoa(f.Deletions)+map[bool]string{true: " binary"}[f.Binary])
	}
	want := "gone.md deleted +0 -1|new note.md added +1 -0|old.md modified +2 -1|pic.bin added +0 -0 binary"
	if strings.Join(got, "|") != want {
		t.Fatalf("files\n got %s\nwant %s", strings.Join(got, "|"), want)
	}
	diff, err := g.CommitDiff(ctx, "sebastian", head)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"--- a/old.md", "+++ b/old.md", "-two", "+three", "+++ b/new note.md", "Binary files /dev/null and b/pic.bin differ"} {
		if !strings.Contains(diff, s) {
			t.Fatalf("diff lacks %q:\n%s", s, diff)
		}
	}
	if strings.Contains(diff, "hers") || strings.Contains(diff, "sebastian/") {
		t.Fatalf("diff shows another folder or the person's prefix:\n%s", diff)
	}
	for _, bad := range []string{"--output=/tmp/x", "HEAD~1..HEAD", ""} {
		if _, err := g.CommitDiff(ctx, "sebastian", bad); err == nil {
			t.Fatalf("commit %q was taken", bad)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
