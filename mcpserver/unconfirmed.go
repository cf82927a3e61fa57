package mcpserver

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/text/unicode/norm"

	"github.com/majorhq/major/internal/atomicfile"
	"github.com/majorhq/major/personstate"
)

// RepeatWindow is how long after LinkedIn left open whether a post,
// comment or reply was published an identical one of the same person
// (same tool, same target, same text) is refused, unless the person
// approves that one again. LinkedIn lists what it applied seconds, rarely
// minutes, later; a day leaves the person time to look.
const RepeatWindow = 24 * time.Hour

// approvalTTL is how long a person's approval of one publishing call
// waits for that call; the CLI makes it at once.
const approvalTTL = 10 * time.Minute

// Unconfirmed is the record of a server's publishes whose outcome LinkedIn
// left open (an ambiguous answer, or a success without an id): for
// RepeatWindow, an identical publish of the same person is refused unless
// the person approved it again.
//
// It lives in a file of each person's folder of the server's state
// directory (personstate) rather than in the vault's audit log (which
// gets a line for each such publish too, for people to read): the check runs before every publish and must not
// depend on git (a commit can wait for a sync or fail, a pull can rewrite
// the log, and the log is prose, not a record to parse), and the state
// directory is the server's own, outside every vault. The file is
// replaced atomically and synced before the model hears of the unknown
// outcome, so a crash or a restart right after keeps it; what must not be
// lost is the record of the last day, and that is all the file holds.
type Unconfirmed struct {
	// dir is the state directory; each person's record is a file of
	// their folder (personstate).
	dir string
	now func() time.Time

	mu   sync.Mutex
	sent map[unconfirmedKey]time.Time
}

type unconfirmedKey struct{ person, key string }

// unconfirmedFile is the file's shape.
type unconfirmedFile struct {
	Unconfirmed []unconfirmedEntry `json:"unconfirmed"`
}

type unconfirmedEntry struct {
	Person string `json:"person"`
	// Key is publishKey's hash of the tool, its target and the text: the
	// file holds no text.
	Key  string    `json:"key"`
	Sent time.Time `json:"sent"`
}

// OpenUnconfirmed reads the record of every person with a folder in the
// state directory dir (a missing file is an empty record); "" keeps the
// record in memory only. now is the clock (nil: time.Now).
func OpenUnconfirmed(dir string, now func() time.Time) (*Unconfirmed, error) {
	if now == nil {
		now = time.Now
	}
	u := &Unconfirmed{dir: dir, now: now, sent: map[unconfirmedKey]time.Time{}}
	if dir == "" {
		return u, nil
	}
	persons, err := personstate.List(dir)
	if err != nil {
		return nil, err
	}
	for _, p := range persons {
		if err := u.Reload(p); err != nil {
			return nil, err
		}
	}
	return u, nil
}

// Reload reads person's record from their folder again, in place of what
// was kept of them: a person taken in from another server brings theirs,
// one who moved away takes it along.
func (u *Unconfirmed) Reload(person string) error {
	if u.dir == "" {
		return nil
	}
	path := u.path(person)
	var f unconfirmedFile
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("read the record of unconfirmed LinkedIn publishes: %w", err)
	default:
		if err := json.Unmarshal(data, &f); err != nil {
			return fmt.Errorf("read the record of unconfirmed LinkedIn publishes %s: %w", path, err)
		}
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	for k := range u.sent {
		if k.person == person {
			delete(u.sent, k)
		}
	}
	for _, e := range f.Unconfirmed {
		if e.Person == person {
			u.sent[unconfirmedKey{e.Person, e.Key}] = e.Sent
		}
	}
	return nil
}

// path is person's record.
func (u *Unconfirmed) path(person string) string {
	return personstate.File(u.dir, person, personstate.UnconfirmedFile)
}

// since reports when an identical publish was sent without LinkedIn
// confirming it, within RepeatWindow.
func (u *Unconfirmed) since(person, key string) (time.Time, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	at, ok := u.sent[unconfirmedKey{person, key}]
	if !ok || u.now().Sub(at) >= RepeatWindow {
		return time.Time{}, false
	}
	return at, true
}

// add records a publish sent at at whose outcome is unknown, on disk
// before it returns. The record holds in memory even if the disk fails.
func (u *Unconfirmed) add(person, key string, at time.Time) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.sent[unconfirmedKey{person, key}] = at
	return u.saveLocked(person)
}

// remove forgets an unconfirmed publish: an identical one went through
// since, with the person's approval.
func (u *Unconfirmed) remove(person, key string) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	k := unconfirmedKey{person, key}
	if _, ok := u.sent[k]; !ok {
		return nil
	}
	delete(u.sent, k)
	return u.saveLocked(person)
}

// saveLocked writes person's record, without the entries past
// RepeatWindow. u.mu is held: publishes whose outcome is unknown are
// rare, and the next check must see this one.
func (u *Unconfirmed) saveLocked(person string) error {
	now := u.now()
	f := unconfirmedFile{Unconfirmed: []unconfirmedEntry{}}
	for k, at := range u.sent {
		if now.Sub(at) >= RepeatWindow {
			delete(u.sent, k)
			continue
		}
		if k.person == person {
			f.Unconfirmed = append(f.Unconfirmed, unconfirmedEntry{Person: k.person, Key: k.key, Sent: at.UTC()})
		}
	}
	if u.dir == "" {
		return nil
	}
	sort.Slice(f.Unconfirmed, func(i, j int) bool { return f.Unconfirmed[i].Sent.Before(f.Unconfirmed[j].Sent) })
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return fmt.Errorf("encode the record of unconfirmed LinkedIn publishes: %w", err)
	}
	path := u.path(person)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("save the record of unconfirmed LinkedIn publishes: %w", err)
	}
	if err := atomicfile.Write(path, data); err != nil {
		return fmt.Errorf("save the record of unconfirmed LinkedIn publishes: %w", err)
	}
	return nil
}

// publishKey identifies a publish for the repeat check: the tool, what it
// publishes on (the post, the post and comment) and the text, canonical
// (canonicalText), hashed.
func publishKey(tool string, args map[string]any) string {
	arg := func(name string) string {
		v, _ := args[name].(string)
		return v
	}
	h := sha256.New()
	for _, part := range []string{tool, strings.TrimSpace(arg("post_urn")), strings.TrimSpace(arg("comment_urn")), canonicalText(arg("text"))} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// canonicalText is a text as a reader sees it: Unicode NFC, each line
// without its surrounding spaces and with runs of spaces as one, without
// blank lines around it; so a repeat that only differs in spacing is the
// same text.
func canonicalText(s string) string {
	s = strings.ReplaceAll(norm.NFC.String(s), "\r\n", "\n")
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.Join(strings.Fields(l), " ")
	}
	return strings.Trim(strings.Join(lines, "\n"), "\n")
}

// approvals are the publishing calls persons approved and their CLI has
// not made yet, each good for one call.
type approvals struct {
	mu  sync.Mutex
	now func() time.Time
	at  map[unconfirmedKey]time.Time
}

func (a *approvals) add(person, key string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	for k, at := range a.at {
		if now.Sub(at) >= approvalTTL {
			delete(a.at, k)
		}
	}
	a.at[unconfirmedKey{person, key}] = now
}

// take uses up an approval of this call, if there is one.
func (a *approvals) take(person, key string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	k := unconfirmedKey{person, key}
	at, ok := a.at[k]
	delete(a.at, k)
	return ok && a.now().Sub(at) < approvalTTL
}
