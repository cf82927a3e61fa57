// Package clihome keeps each person's Claude Code home: the folder that
// is the CLI's HOME (and, as HOME/.claude, its configuration directory)
// for every claude the server starts for that person. There the CLI keeps
// the person's transcripts (which --resume reads), file checkpoints
// (which a rewind restores), its own settings and caches. One person's
// home is mounted into that person's sandbox only, so no one's shell or
// tool can read another person's conversations.
//
// It owns where a home is (state-dir/persons/<person>/home), making it,
// and moving what a server of an earlier version left in the one CLI
// home all persons shared into each person's own. It does not start the
// CLI or decide what the CLI may see (package sandbox does).
package clihome

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/personstate"
)

// Home is person's CLI home under stateDir, in their folder.
func Home(stateDir, person string) string {
	return personstate.File(stateDir, person, personstate.HomeDir)
}

// ConfigDir is the CLI's configuration directory in home
// (CLAUDE_CONFIG_DIR).
func ConfigDir(home string) string { return filepath.Join(home, ".claude") }

// Make makes person's home (mode 0700) and returns it.
func Make(stateDir, person string) (string, error) {
	home := Home(stateDir, person)
	if err := os.MkdirAll(ConfigDir(home), 0o700); err != nil {
		return "", fmt.Errorf("make the CLI home of %s: %w", person, err)
	}
	return home, nil
}

// Env is the CLI's environment for home: HOME and CLAUDE_CONFIG_DIR.
func Env(home string) []string {
	return []string{"HOME=" + home, "CLAUDE_CONFIG_DIR=" + ConfigDir(home)}
}

// SharedConfigDir is the CLI configuration directory the server's own
// environment names: $CLAUDE_CONFIG_DIR, else $HOME/.claude, else "".
// Servers before per-person homes ran every CLI with it.
func SharedConfigDir(getenv func(string) string) string {
	if d := getenv("CLAUDE_CONFIG_DIR"); d != "" {
		return d
	}
	if h := getenv("HOME"); h != "" {
		return filepath.Join(h, ".claude")
	}
	return ""
}

// ProjectName is the folder the CLI keeps the transcripts of conversations
// run in dir under, in its configuration directory's projects/: the
// absolute path with every character that is not a letter or digit
// replaced by '-'.
func ProjectName(dir string) string {
	return nonAlnum.ReplaceAllString(dir, "-")
}

var nonAlnum = regexp.MustCompile(`[^a-zA-Z0-9]`)

// sessionFile is a transcript's name: the conversation's id, .jsonl.
var sessionFile = regexp.MustCompile(`^([0-9a-fA-F-]{36})\.jsonl$`)

// Migrate moves what the shared configuration directory shared holds of
// each person's conversations (dirs maps a person to their vault folder,
// the CLI's working directory) into that person's home under stateDir:
// the transcripts, and each conversation's file checkpoints and todos. It
// is safe to run at every start: what was moved is gone from shared, and
// what a home has already is never overwritten (the shared copy is then
// left where it is and logged). It returns how many conversations moved.
func Migrate(shared, stateDir string, dirs map[string]string, log zerolog.Logger) (int, error) {
	if shared == "" {
		return 0, nil
	}
	moved := 0
	var errs []error
	for person, dir := range dirs {
		src := filepath.Join(shared, "projects", ProjectName(dir))
		entries, err := os.ReadDir(src)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		home, err := Make(stateDir, person)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		conf := ConfigDir(home)
		dst := filepath.Join(conf, "projects", ProjectName(dir))
		// The person's sandbox writes the home: a link planted on the way
		// would take the move somewhere else.
		if err := noLinks(home, dst); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := os.MkdirAll(dst, 0o700); err != nil {
			errs = append(errs, err)
			continue
		}
		n := 0
		for _, e := range entries {
			ok, err := move(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name()), log)
			m := sessionFile.FindStringSubmatch(e.Name())
			if err != nil || !ok || m == nil {
				errs = append(errs, err)
				continue
			}
			n++
			id := m[1]
			// A conversation's checkpoints (for rewinds) and its todos
			// go with it.
			for _, d := range []string{"file-history", "todos"} {
				if err := noLinks(home, filepath.Join(conf, d)); err != nil {
					errs = append(errs, err)
					continue
				}
				srcs := []string{filepath.Join(shared, d, id)}
				if d == "todos" {
					srcs, _ = filepath.Glob(filepath.Join(shared, d, id+"*"))
				}
				for _, src := range srcs {
					_, err = move(src, filepath.Join(conf, d, filepath.Base(src)), log)
					errs = append(errs, err)
				}
			}
		}
		_ = os.Remove(src) // only if it is empty now
		if n > 0 {
			log.Info().Str("person", person).Int("conversations", n).Str("to", home).Msg("moved the conversations of the shared CLI home into the person's own")
		}
		moved += n
	}
	return moved, errors.Join(errs...)
}

// noLinks fails when home or a path element of p below it is a symbolic
// link (elements that do not exist yet are made by the caller).
func noLinks(home, p string) error {
	rel, err := filepath.Rel(home, p)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return fmt.Errorf("%s is not inside %s", p, home)
	}
	cur := home
	for _, el := range append([]string{"."}, strings.Split(rel, string(filepath.Separator))...) {
		cur = filepath.Join(cur, el)
		st, err := os.Lstat(cur)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if st.Mode()&os.ModeSymlink != 0 || !st.IsDir() {
			return fmt.Errorf("not moved into %s: %s is not a folder (a link?)", home, cur)
		}
	}
	return nil
}

// move renames src to dst, or copies and removes it across file
// systems, and reports whether dst now has src's contents. A missing src
// is nothing to do; a dst with other contents is kept, and src stays.
func move(src, dst string, log zerolog.Logger) (bool, error) {
	if _, err := os.Lstat(src); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if _, err := os.Lstat(dst); err == nil {
		if same, _ := sameTree(src, dst); !same {
			log.Warn().Str("from", src).Str("to", dst).Msg("not moved: the person's CLI home has this already")
			return false, nil
		}
		return true, os.RemoveAll(src)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return false, fmt.Errorf("move %s: %w", src, err)
	}
	if err := os.Rename(src, dst); err == nil {
		return true, nil
	}
	// Another file system (a HOME on another disk than the state
	// directory): copy, then remove.
	if err := copyTree(src, dst); err != nil {
		_ = os.RemoveAll(dst)
		return false, fmt.Errorf("move %s: %w", src, err)
	}
	return true, os.RemoveAll(src)
}

// sameTree reports whether two files hold the same bytes; folders count
// as the same when dst has every file of src with the same bytes.
func sameTree(src, dst string) (bool, error) {
	same := true
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		a, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(filepath.Join(dst, rel))
		if err != nil || string(a) != string(b) {
			same = false
			return filepath.SkipAll
		}
		return nil
	})
	return same && err == nil, err
}

func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o700)
		case d.Type().IsRegular():
			return copyFile(p, target)
		default:
			// Links and the like are not the CLI's; they stay behind.
			return nil
		}
	})
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}

// Rehome moves the transcripts person's home keeps of conversations run
// in from (their vault folder on the server their state came from) to
// where the CLI looks for them when run in dir (their folder here), so
// their chats resume on this server: the folder's name is made from the
// path (ProjectName). Transcripts dir has already are kept.
func Rehome(stateDir, person, from, dir string) error {
	if from == "" || from == dir {
		return nil
	}
	home := Home(stateDir, person)
	projects := filepath.Join(ConfigDir(home), "projects")
	src, dst := filepath.Join(projects, ProjectName(from)), filepath.Join(projects, ProjectName(dir))
	// The home came from a sandbox: a link in either path would have
	// the renames below read or write a folder of the host's.
	for _, p := range []string{src, dst} {
		if err := noLinks(home, p); err != nil {
			return fmt.Errorf("move the CLI's transcripts of %s: %w", person, err)
		}
	}
	entries, err := os.ReadDir(src)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return err
	}
	for _, e := range entries {
		to := filepath.Join(dst, e.Name())
		if _, err := os.Lstat(to); err == nil {
			continue
		}
		if err := os.Rename(filepath.Join(src, e.Name()), to); err != nil {
			return fmt.Errorf("move the CLI's transcripts of %s: %w", person, err)
		}
	}
	_ = os.Remove(src) // kept if something stayed
	return nil
}

// OpenTranscript opens, for reading, the transcript the CLI keeps in home
// of conversation id run in dir. The person's sandbox writes the home: a
// link anywhere on the way, or anything but a regular file, is refused,
// and a FIFO planted there never holds the caller.
func OpenTranscript(home, dir, id string) (*os.File, error) {
	if !conversationID.MatchString(id) {
		return nil, fmt.Errorf("open transcript: %q is not a conversation id", id)
	}
	folder := filepath.Join(ConfigDir(home), "projects", ProjectName(dir))
	if err := noLinks(home, folder); err != nil {
		return nil, fmt.Errorf("open transcript: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(folder, id+".jsonl"), os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("open transcript: %w", err)
	}
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		_ = f.Close()
		return nil, fmt.Errorf("open transcript: %s is not a regular file", f.Name())
	}
	return f, nil
}

// conversationID is the form of a CLI conversation's id.
var conversationID = regexp.MustCompile(`^[0-9a-fA-F-]{36}$`)

// IsConversationID reports whether id has the form of a CLI
// conversation's id (what the sandbox names may be anything).
func IsConversationID(id string) bool { return conversationID.MatchString(id) }
