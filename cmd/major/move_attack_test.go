package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/majorhq/major/clihome"
)

// movePerson exports person from the running server s and imports the
// archive into the state directory stateB, with no server running there.
func movePerson(tb testing.TB, s *server, person, stateB string) {
	tb.Helper()
	archive := filepath.Join(tb.TempDir(), person+".tar.gz")
	var out bytes.Buffer
	if err := run(context.Background(), []string{"person", "export", "--state-dir", s.state, person, archive}, nil, &out, &out); err != nil {
		tb.Fatalf("export: %v\n%s", err, out.String())
	}
	if err := run(context.Background(), []string{"person", "import", "--state-dir", stateB, archive}, nil, &out, &out); err != nil {
		tb.Fatalf("import: %v\n%s", err, out.String())
	}
}

// Code in a person's sandbox writes their CLI home, which moves with
// them. A link it plants there, named as the CLI's project folder of the
// person's vault folder on the new server, survives the archive; the new
// server, moving the person's transcripts to that project folder, follows
// it and writes their files into whatever folder of its host the link
// names (another person's CLI configuration, where a CLAUDE.md instructs
// their model; the vault's git hooks).
func TestMovedHomeLinksReachNothingOutside(t *testing.T) {
	t.Parallel()
	s, _ := startWithShell(t)
	id := s.newSessionAs(t, "sebastian")
	outside := t.TempDir()
	newVault := filepath.Join(t.TempDir(), "vault")
	project := clihome.ProjectName(filepath.Join(newVault, "sebastian"))
	plant := `p=${CLAUDE_CONFIG_DIR:-$HOME/.claude}/projects && mkdir -p "$p" && ln -s '` + outside + `' "$p/` + project + `" && echo PLANTED`
	if got := s.shell(t, id, plant); !strings.Contains(got, "PLANTED") {
		t.Fatalf("could not plant the link: %s", got)
	}
	stateB := t.TempDir()
	movePerson(t, s, "sebastian", stateB)
	// As the new server does at its start, or once the import is in.
	err := settleMoved(stateB, "sebastian", filepath.Join(newVault, "sebastian"))
	if entries, _ := os.ReadDir(outside); len(entries) > 0 {
		t.Errorf("the new server moved the person's transcripts into a folder a link in their home named: %s holds %d entries", outside, len(entries))
	}
	if err == nil {
		t.Errorf("settling the moved person reported no error for the link in their home")
	}
}

// A file the sandbox makes sparse costs the server nothing on disk, and
// as many as it likes fit in the person's home; in the archive its zeros
// compress a thousandfold. The new server wrote every byte of it: an
// archive of a few megabytes filled its disk with gigabytes.
func TestMovedSparseFilesStaySparse(t *testing.T) {
	t.Parallel()
	s, _ := startWithShell(t)
	id := s.newSessionAs(t, "sebastian")
	const size = 16 << 20
	if got := s.shell(t, id, `truncate -s `+fmt.Sprint(size)+` "$HOME/sparse" && echo PLANTED`); !strings.Contains(got, "PLANTED") {
		t.Fatalf("could not make the file: %s", got)
	}
	stateB := t.TempDir()
	movePerson(t, s, "sebastian", stateB)
	p := filepath.Join(stateB, "persons", "sebastian", "home", "sparse")
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	if st.Size != size {
		t.Fatalf("the imported file has %d bytes, want %d", st.Size, size)
	}
	if used := st.Blocks * 512; used > size/8 {
		t.Errorf("the imported file takes %d MiB of disk for the %d MiB of zeros that took none", used>>20, size>>20)
	}
}
