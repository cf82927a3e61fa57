package clihome_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/clihome"
)

func write(tb testing.TB, path, content string) {
	tb.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		tb.Fatal(err)
	}
}

func read(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return string(b)
}

// The CLI names a project's folder after its working directory.
func TestProjectName(t *testing.T) {
	for dir, want := range map[string]string{
		"/tmp/exp/v_a.b/sebastian": "-tmp-exp-v-a-b-sebastian",
		"/srv/notes/petra":         "-srv-notes-petra",
	} {
		if got := clihome.ProjectName(dir); got != want {
			t.Errorf("%s: %s, want %s", dir, got, want)
		}
	}
}

// Each person's conversations, with their checkpoints and todos, move
// from the shared home into their own; another person's and another
// folder's stay; a second run changes nothing; what a home has already
// is never overwritten.
func TestMigrate(t *testing.T) {
	shared, state := t.TempDir(), t.TempDir()
	dirs := map[string]string{"sebastian": "/srv/notes/sebastian", "petra": "/srv/notes/petra"}
	const seb1, seb2, petra1 = "11111111-1111-1111-1111-111111111111", "22222222-2222-2222-2222-222222222222", "33333333-3333-3333-3333-333333333333"
	sebProject := filepath.Join(shared, "projects", "-srv-notes-sebastian")
	write(t, filepath.Join(sebProject, seb1+".jsonl"), "seb one")
	write(t, filepath.Join(sebProject, seb2+".jsonl"), "seb two")
	write(t, filepath.Join(sebProject, "memory", "notes.md"), "memory")
	write(t, filepath.Join(shared, "file-history", seb1, "abc@v1"), "checkpoint")
	write(t, filepath.Join(shared, "todos", seb1+"-agent-"+seb1+".json"), "[]")
	write(t, filepath.Join(shared, "projects", "-srv-notes-petra", petra1+".jsonl"), "petra one")
	write(t, filepath.Join(shared, "projects", "-elsewhere", "44444444-4444-4444-4444-444444444444.jsonl"), "not a vault")
	// sebastian's home has seb2 already, with other contents.
	sebConf := clihome.ConfigDir(clihome.Home(state, "sebastian"))
	write(t, filepath.Join(sebConf, "projects", "-srv-notes-sebastian", seb2+".jsonl"), "seb two, newer")

	n, err := clihome.Migrate(shared, state, dirs, zerolog.Nop())
	if err != nil || n != 2 {
		t.Fatalf("moved %d, %v; want 2 conversations (seb2 is kept back)", n, err)
	}
	petraConf := clihome.ConfigDir(clihome.Home(state, "petra"))
	for path, want := range map[string]string{
		filepath.Join(sebConf, "projects", "-srv-notes-sebastian", seb1+".jsonl"):        "seb one",
		filepath.Join(sebConf, "projects", "-srv-notes-sebastian", seb2+".jsonl"):        "seb two, newer",
		filepath.Join(sebConf, "projects", "-srv-notes-sebastian", "memory", "notes.md"): "memory",
		filepath.Join(sebConf, "file-history", seb1, "abc@v1"):                           "checkpoint",
		filepath.Join(sebConf, "todos", seb1+"-agent-"+seb1+".json"):                     "[]",
		filepath.Join(petraConf, "projects", "-srv-notes-petra", petra1+".jsonl"):        "petra one",
		// Kept back, not lost: the home had its own.
		filepath.Join(sebProject, seb2+".jsonl"):                                                      "seb two",
		filepath.Join(shared, "projects", "-elsewhere", "44444444-4444-4444-4444-444444444444.jsonl"): "not a vault",
	} {
		if got := read(path); got != want {
			t.Errorf("%s: %q, want %q", path, got, want)
		}
	}
	for _, gone := range []string{filepath.Join(sebProject, seb1+".jsonl"), filepath.Join(shared, "file-history", seb1),
		filepath.Join(shared, "projects", "-srv-notes-petra")} {
		if _, err := os.Stat(gone); err == nil {
			t.Errorf("%s is still in the shared home", gone)
		}
	}
	if st, err := os.Stat(clihome.Home(state, "petra")); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("petra's home: %v %v", st, err)
	}
	if n, err := clihome.Migrate(shared, state, dirs, zerolog.Nop()); err != nil || n != 0 {
		t.Errorf("second run: moved %d, %v", n, err)
	}
	if got := read(filepath.Join(sebConf, "projects", "-srv-notes-sebastian", seb2+".jsonl")); got != "seb two, newer" {
		t.Errorf("the second run overwrote the home's copy: %q", got)
	}
}

// A person's sandbox writes their home: a link planted where the move
// goes (their projects folder pointing at another person's notes) is
// never followed; the conversation stays in the shared home.
func TestMigrateFollowsNoLink(t *testing.T) {
	shared, state, elsewhere := t.TempDir(), t.TempDir(), t.TempDir()
	const id = "11111111-1111-1111-1111-111111111111"
	write(t, filepath.Join(shared, "projects", "-srv-notes-sebastian", id+".jsonl"), "seb one")
	conf := clihome.ConfigDir(clihome.Home(state, "sebastian"))
	if err := os.MkdirAll(conf, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, filepath.Join(conf, "projects")); err != nil {
		t.Fatal(err)
	}
	n, err := clihome.Migrate(shared, state, map[string]string{"sebastian": "/srv/notes/sebastian"}, zerolog.Nop())
	if n != 0 || err == nil {
		t.Fatalf("moved %d through a link (%v)", n, err)
	}
	if entries, _ := os.ReadDir(elsewhere); len(entries) != 0 {
		t.Fatalf("wrote %v where the link points", entries)
	}
	if got := read(filepath.Join(shared, "projects", "-srv-notes-sebastian", id+".jsonl")); got != "seb one" {
		t.Fatalf("the shared copy: %q", got)
	}
}

// Rehome moves the transcripts kept under the vault folder's path on
// another server to this server's, keeping any this one has already.
func TestRehome(t *testing.T) {
	state := t.TempDir()
	projects := filepath.Join(clihome.ConfigDir(clihome.Home(state, "petra")), "projects")
	from, dir := "/srv/a/vault/petra", "/srv/b/vault/petra"
	for name, content := range map[string]string{
		filepath.Join(clihome.ProjectName(from), "c1.jsonl"): "moved",
		filepath.Join(clihome.ProjectName(from), "c2.jsonl"): "theirs",
		filepath.Join(clihome.ProjectName(dir), "c2.jsonl"):  "mine",
	} {
		p := filepath.Join(projects, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := clihome.Rehome(state, "petra", from, dir); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"c1.jsonl": "moved", "c2.jsonl": "mine"} {
		if b, err := os.ReadFile(filepath.Join(projects, clihome.ProjectName(dir), name)); err != nil || string(b) != want {
			t.Fatalf("%s: %q, %v", name, b, err)
		}
	}
	if err := clihome.Rehome(state, "petra", dir, dir); err != nil {
		t.Fatal(err)
	}
}

// A transcript is opened only as a regular file reached without a link:
// the person's sandbox writes the home, and could plant either.
func TestOpenTranscriptRefusesLinksAndFIFOs(t *testing.T) {
	home := t.TempDir()
	dir := "/vault/sebastian"
	id := "0f8b6f4e-6a55-4c55-9f43-1d2f6e8c1a10"
	folder := filepath.Join(clihome.ConfigDir(home), "projects", clihome.ProjectName(dir))
	if err := os.MkdirAll(folder, 0o700); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("not yours"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		plant func(t *testing.T, file string)
		ok    bool
	}{
		{name: "a regular file", ok: true, plant: func(t *testing.T, file string) {
			if err := os.WriteFile(file, []byte("{}\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "a link to another file", plant: func(t *testing.T, file string) {
			if err := os.Symlink(secret, file); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "a FIFO", plant: func(t *testing.T, file string) {
			if err := syscall.Mkfifo(file, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "missing", plant: func(*testing.T, string) {}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(folder, id+".jsonl")
			_ = os.Remove(file)
			tc.plant(t, file)
			f, err := clihome.OpenTranscript(home, dir, id)
			if (err == nil) != tc.ok {
				t.Fatalf("OpenTranscript: %v, want ok=%v", err, tc.ok)
			}
			if f != nil {
				f.Close()
			}
		})
	}
	t.Run("a link on the way", func(t *testing.T) {
		other := t.TempDir()
		if err := os.WriteFile(filepath.Join(other, id+".jsonl"), []byte("{}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(folder); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(other, folder); err != nil {
			t.Fatal(err)
		}
		if f, err := clihome.OpenTranscript(home, dir, id); err == nil {
			f.Close()
			t.Fatal("opened through a linked folder")
		}
	})
	if _, err := clihome.OpenTranscript(home, dir, "../../etc/passwd"); err == nil {
		t.Fatal("a path for an id was taken")
	}
}

// The home came from a sandbox, so any folder on the way from it to
// either project folder may be a link: to another person's transcripts
// (which the move would take into this person's home) or to a folder of
// the host's (which it would fill). Rehome follows none and moves
// nothing.
func TestRehomeFollowsNoLink(t *testing.T) {
	from, dir := "/srv/a/vault/petra", "/srv/b/vault/petra"
	for _, link := range []string{
		".claude",
		".claude/projects",
		".claude/projects/" + clihome.ProjectName(from),
		".claude/projects/" + clihome.ProjectName(dir),
	} {
		t.Run(link, func(t *testing.T) {
			state := t.TempDir()
			home := clihome.Home(state, "petra")
			// What the link names holds a transcript and mirrors the
			// folders below it, so it resolves whichever it replaces.
			outside := t.TempDir()
			if err := os.MkdirAll(filepath.Join(outside, "projects", clihome.ProjectName(from)), 0o700); err != nil {
				t.Fatal(err)
			}
			for _, p := range []string{"victim.jsonl", "projects/victim.jsonl", "projects/" + clihome.ProjectName(from) + "/victim.jsonl"} {
				if err := os.WriteFile(filepath.Join(outside, p), []byte("theirs"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			own := filepath.Join(clihome.ConfigDir(home), "projects", clihome.ProjectName(from), "mine.jsonl")
			if err := os.MkdirAll(filepath.Join(home, filepath.Dir(link)), 0o700); err != nil {
				t.Fatal(err)
			}
			target := outside
			if strings.Count(link, "/") == 1 {
				target = filepath.Join(outside, "projects")
			}
			if strings.Count(link, "/") == 2 {
				target = filepath.Join(outside, "projects", clihome.ProjectName(from))
			}
			if err := os.Symlink(target, filepath.Join(home, link)); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Dir(own), 0o700); err == nil {
				_ = os.WriteFile(own, []byte("mine"), 0o600)
			}
			before := tree(t, outside)
			if err := clihome.Rehome(state, "petra", from, dir); err == nil {
				t.Errorf("Rehome moved through a link at %s with no error", link)
			}
			if after := tree(t, outside); after != before {
				t.Errorf("Rehome changed what the link at %s names:\nbefore %s\nafter  %s", link, before, after)
			}
		})
	}
}

// tree lists the files under dir, for comparison.
func tree(tb testing.TB, dir string) string {
	tb.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
	return strings.Join(out, " ")
}
