package personstate

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeTree writes files (path → content, relative to dir) under dir.
func writeTree(tb testing.TB, dir string, files map[string]string) {
	tb.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			tb.Fatal(err)
		}
	}
}

var petraFiles = map[string]string{
	"sessions/s1/meta.json":                      `{"id":"s1","person":"petra"}`,
	"sessions/s1/events.ndjson":                  "{\"seq\":1}\n{\"seq\":2}\n",
	"home/.claude/projects/-vault-petra/c.jsonl": "{\"type\":\"user\"}\n",
	"usage.json":          `{"days":{}}`,
	"notify/devices.json": `[]`,
}

func exported(tb testing.TB, files map[string]string) []byte {
	tb.Helper()
	src := tb.TempDir()
	writeTree(tb, Dir(src, "petra"), files)
	if err := os.MkdirAll(File(src, "petra", "home"), 0o700); err != nil {
		tb.Fatal(err)
	}
	if err := os.Symlink("../usage.json", File(src, "petra", "home", "link")); err != nil {
		tb.Fatal(err)
	}
	var buf bytes.Buffer
	c, err := Export(&buf, src, "petra", "/srv/a/vault/petra")
	if err != nil {
		tb.Fatal(err)
	}
	if c.Files != len(files)+1 {
		tb.Fatalf("exported %d files, want %d", c.Files, len(files)+1)
	}
	return buf.Bytes()
}

// An exported person is imported on another state directory whole: the
// same files, the same link.
func TestExportImport(t *testing.T) {
	archive := exported(t, petraFiles)
	dst := t.TempDir()
	got, err := Import(bytes.NewReader(archive), dst, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.Person != "petra" || got.Replaced {
		t.Fatalf("imported %+v", got)
	}
	for name, want := range petraFiles {
		b, err := os.ReadFile(File(dst, "petra", name))
		if err != nil || string(b) != want {
			t.Fatalf("%s: %q, %v", name, b, err)
		}
	}
	if l, err := os.Readlink(File(dst, "petra", "home", "link")); err != nil || l != "../usage.json" {
		t.Fatalf("link: %q, %v", l, err)
	}
	if from, err := MovedFrom(dst, "petra"); err != nil || from != "/srv/a/vault/petra" {
		t.Fatalf("moved from %q, %v", from, err)
	}
	if err := Settled(dst, "petra"); err != nil {
		t.Fatal(err)
	}
	if from, _ := MovedFrom(dst, "petra"); from != "" {
		t.Fatalf("settled, still moved from %q", from)
	}
	if persons, _ := List(dst); len(persons) != 1 || persons[0] != "petra" {
		t.Fatalf("persons after the import: %v", persons)
	}
}

// archive builds a tar.gz of entries as given, for archives Export
// never writes.
func archive(tb testing.TB, entries []tar.Header, bodies []string) []byte {
	tb.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for i, h := range entries {
		h.Size = int64(len(bodies[i]))
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if err := tw.WriteHeader(&h); err != nil {
			tb.Fatal(err)
		}
		if _, err := tw.Write([]byte(bodies[i])); err != nil {
			tb.Fatal(err)
		}
	}
	tw.Close()
	gz.Close()
	return buf.Bytes()
}

// Input that is not a whole archive of this format, or a person who has
// state here, is refused, and the state directory holds nothing of it
// afterwards: no person folder, no staging folder.
func TestImportRefuses(t *testing.T) {
	whole := exported(t, petraFiles)
	marker := `{"format":"major-person-archive","version":1,"person":"petra"}`
	tests := []struct {
		name     string
		input    []byte
		existing bool
		replace  bool
		want     error
	}{
		{"not gzip", []byte("hello"), false, false, ErrNotArchive},
		{"another format", archive(t, []tar.Header{{Name: "major-person.json"}}, []string{`{"format":"other","version":1,"person":"petra"}`}), false, false, ErrNotArchive},
		{"another version", archive(t, []tar.Header{{Name: "major-person.json"}}, []string{`{"format":"major-person-archive","version":2,"person":"petra"}`}), false, false, ErrNotArchive},
		{"no marker", archive(t, []tar.Header{{Name: "person/usage.json"}}, []string{"{}"}), false, false, ErrNotArchive},
		{"bad person", archive(t, []tar.Header{{Name: "major-person.json"}}, []string{`{"format":"major-person-archive","version":1,"person":"../x"}`}), false, false, ErrNotArchive},
		{"escaping entry", archive(t, []tar.Header{{Name: "major-person.json"}, {Name: "person/../../x"}}, []string{marker, "x"}), false, false, ErrNotArchive},
		{"device entry", archive(t, []tar.Header{{Name: "major-person.json"}, {Name: "person/fifo", Typeflag: tar.TypeFifo}}, []string{marker, ""}), false, false, ErrNotArchive},
		// The server makes no link in a person's folder; the sandbox
		// makes them in the home only. One in place of the home would
		// have the home's mount give the sandbox the host's root.
		{"link as the home", archive(t, []tar.Header{{Name: "major-person.json"}, {Name: "person/home", Typeflag: tar.TypeSymlink, Linkname: "/"}}, []string{marker, ""}), false, false, ErrNotArchive},
		{"link among the sessions", archive(t, []tar.Header{{Name: "major-person.json"}, {Name: "person/sessions/s1", Typeflag: tar.TypeSymlink, Linkname: "/etc"}}, []string{marker, ""}), false, false, ErrNotArchive},
		{"no end entry", archive(t, []tar.Header{{Name: "major-person.json"}, {Name: "person/usage.json"}}, []string{marker, "{}"}), false, false, ErrTruncated},
		{"fewer files than the end names", archive(t, []tar.Header{{Name: "major-person.json"}, {Name: "person/usage.json"}, {Name: "major-person-end.json"}}, []string{marker, "{}", `{"files":2,"bytes":4}`}), false, false, ErrTruncated},
		{"cut off halfway", whole[:len(whole)/2], false, false, ErrTruncated},
		{"cut off before the checksum", whole[:len(whole)-4], false, false, ErrTruncated},
		{"person exists", whole, true, false, ErrExists},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst := t.TempDir()
			if tt.existing {
				writeTree(t, Dir(dst, "petra"), map[string]string{"usage.json": "mine"})
			}
			_, err := Import(bytes.NewReader(tt.input), dst, tt.replace, nil)
			if !errors.Is(err, tt.want) {
				t.Fatalf("import: %v, want %v", err, tt.want)
			}
			entries, _ := os.ReadDir(filepath.Join(dst, "persons"))
			for _, e := range entries {
				if strings.HasPrefix(e.Name(), ".") || (!tt.existing && e.Name() == "petra") {
					t.Fatalf("left behind: %s", e.Name())
				}
			}
			if _, err := os.Stat(filepath.Join(dst, "x")); err == nil {
				t.Fatal("an entry was written outside the state directory")
			}
			if tt.existing {
				if b, _ := os.ReadFile(File(dst, "petra", "usage.json")); string(b) != "mine" {
					t.Fatalf("the existing person's state changed: %q", b)
				}
			}
		})
	}
}

// With replace, a person's state here is replaced whole; an empty folder
// (the home the server makes for everyone) is no state and needs no
// replace.
func TestImportReplaces(t *testing.T) {
	whole := exported(t, petraFiles)
	dst := t.TempDir()
	writeTree(t, Dir(dst, "petra"), map[string]string{"usage.json": "mine", "sessions/old/meta.json": "{}"})
	got, err := Import(bytes.NewReader(whole), dst, true, nil)
	if err != nil || !got.Replaced {
		t.Fatalf("replace: %+v, %v", got, err)
	}
	if _, err := os.Stat(File(dst, "petra", "sessions", "old")); err == nil {
		t.Fatal("the replaced state's session is still there")
	}
	entries, _ := os.ReadDir(filepath.Join(dst, "persons"))
	if len(entries) != 1 {
		t.Fatalf("persons/ holds %d entries after the replace", len(entries))
	}

	empty := t.TempDir()
	if err := os.MkdirAll(File(empty, "petra", "home"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := Import(bytes.NewReader(whole), empty, false, nil); err != nil {
		t.Fatalf("import over an empty home: %v", err)
	}
}

// Files with runs of zeros (written as holes) come back byte for byte,
// whether they start, end or are made of zeros.
func TestImportKeepsZeros(t *testing.T) {
	block := 64 << 10
	data := strings.Repeat("x", 100)
	zeros := func(n int) string { return string(make([]byte, n)) }
	tests := map[string]string{
		"zeros only":        zeros(3 * block),
		"ends in zeros":     data + zeros(3*block),
		"starts with zeros": zeros(3*block) + data,
		"zeros between":     data + zeros(2*block+7) + data,
		"short zeros":       zeros(10),
		"empty":             "",
	}
	for name, content := range tests {
		t.Run(name, func(t *testing.T) {
			dst := t.TempDir()
			if _, err := Import(bytes.NewReader(exported(t, map[string]string{"home/f": content})), dst, false, nil); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(File(dst, "petra", "home", "f"))
			if err != nil || string(b) != content {
				t.Fatalf("got %d bytes (%v), want %d", len(b), err, len(content))
			}
		})
	}
}

// A chat the person starts on the new server while the import looks
// (before check, which stops their chats, runs) is state of theirs too:
// without replace the import is refused and the chat stays.
func TestImportSeesAChatStartedMeanwhile(t *testing.T) {
	whole := exported(t, petraFiles)
	dst := t.TempDir()
	_, err := Import(bytes.NewReader(whole), dst, false, func(person string) error {
		writeTree(t, Dir(dst, person), map[string]string{"sessions/new/meta.json": "{}"})
		return nil
	})
	if !errors.Is(err, ErrExists) {
		t.Fatalf("import over a chat started meanwhile: %v, want ErrExists", err)
	}
	if _, err := os.Stat(File(dst, "petra", "sessions", "new", "meta.json")); err != nil {
		t.Fatalf("the chat started meanwhile: %v", err)
	}
}
