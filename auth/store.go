package auth

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// Identity is who a request's token says it is: the token's name and the
// persons it may act as. It never holds the token.
type Identity struct {
	// Name is the token's name, for the access log and the tokens list.
	Name string
	// ID is the token's digest: what the server tells tokens apart by.
	ID      string
	Persons []string
}

// Can reports whether the identity may act as person.
func (id Identity) Can(person string) bool { return slices.Contains(id.Persons, person) }

// Config configures a Store.
type Config struct {
	// Path is the token file; empty for a store of fixed tokens
	// (FromTokens).
	Path   string
	Logger zerolog.Logger
	// Now is the clock; time.Now by default.
	Now func() time.Time
	// Poll is how often the file is checked for changes when no request
	// comes (so a revoked token's open streams are closed); default 1s.
	Poll time.Duration
	// FlushEvery is how often the tokens' last use is written to the
	// file; default 1 minute.
	FlushEvery time.Duration
	// PairingTTL is how long a pairing code can be redeemed; default 10
	// minutes.
	PairingTTL time.Duration
}

// Store is the server's view of the token file: who each token is, read
// again whenever the file changes (checked on every authentication and
// every Poll), their last use, and the pairing codes. Tokens it adds or
// revokes are written to the file through Edit, like `major token`'s.
type Store struct {
	cfg Config
	log zerolog.Logger

	mu       sync.Mutex
	byDigest map[string]Entry
	stamp    fileStamp
	plain    bool
	used     map[string]time.Time // digest -> last use not yet written
	pairings map[string]pairing   // code -> pairing
	watchers []func()
	// guards only the file's reading and writing, so Authenticate never
	// waits for a write.
	fileMu sync.Mutex

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// fileStamp tells whether a file changed: a rewrite (rename) changes its
// inode, an edit in place its size or time.
type fileStamp struct {
	ino, size int64
	mtime     time.Time
}

func stampOf(path string) (fileStamp, error) {
	st, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	s := fileStamp{size: st.Size(), mtime: st.ModTime()}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		s.ino = int64(sys.Ino)
	}
	return s, nil
}

// Open reads the token file and watches it until Close.
func Open(cfg Config) (*Store, error) {
	s := newStore(cfg)
	if err := s.reload(true); err != nil {
		return nil, err
	}
	if len(s.byDigest) == 0 {
		return nil, fmt.Errorf("token file %s has no tokens: add one with `major token add --auth-file %s --person NAME --name NAME`", cfg.Path, cfg.Path)
	}
	if s.plain {
		s.log.Warn().Str("file", cfg.Path).Msg("the token file holds tokens in plain text; it is rewritten hashed at the first change (a token added, revoked or used)")
	}
	go s.watch()
	return s, nil
}

// FromTokens is a store of fixed tokens (token -> persons), kept in
// memory only: for tests and embedding. It cannot add tokens or pair.
func FromTokens(tokens map[string][]string) (*Store, error) {
	s := newStore(Config{})
	for tok, persons := range tokens {
		if tok == "" {
			return nil, errors.New("auth: empty token")
		}
		d := Digest(tok)
		s.byDigest[d] = Entry{Name: "token-" + d[:8], SHA256: d, Persons: persons}
	}
	if err := (&File{Tokens: s.entries()}).check(); err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	close(s.done)
	return s, nil
}

func newStore(cfg Config) *Store {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Poll <= 0 {
		cfg.Poll = time.Second
	}
	if cfg.FlushEvery <= 0 {
		cfg.FlushEvery = time.Minute
	}
	if cfg.PairingTTL <= 0 {
		cfg.PairingTTL = 10 * time.Minute
	}
	return &Store{cfg: cfg, log: cfg.Logger, byDigest: map[string]Entry{}, used: map[string]time.Time{},
		pairings: map[string]pairing{}, stop: make(chan struct{}), done: make(chan struct{})}
}

// Close stops watching the file and writes the tokens' last use.
func (s *Store) Close() {
	s.once.Do(func() {
		close(s.stop)
		<-s.done
		if s.cfg.Path != "" {
			s.flush()
		}
	})
}

// OnChange registers f to be called after the file changed and was read
// again (f may then find tokens revoked). f must not block.
func (s *Store) OnChange(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.watchers = append(s.watchers, f)
}

func (s *Store) watch() {
	defer close(s.done)
	poll := time.NewTicker(s.cfg.Poll)
	defer poll.Stop()
	flush := time.NewTicker(s.cfg.FlushEvery)
	defer flush.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-poll.C:
			s.refresh()
		case <-flush.C:
			s.flush()
		}
	}
}

// refresh reads the file again if it changed since it was last read. A
// file that cannot be read or parsed keeps the tokens last read, and
// says so in the log.
func (s *Store) refresh() {
	if s.cfg.Path == "" {
		return
	}
	st, err := stampOf(s.cfg.Path)
	s.mu.Lock()
	same := err == nil && st == s.stamp
	s.mu.Unlock()
	if same {
		return
	}
	if err := s.reload(false); err != nil {
		s.log.Error().Err(err).Msg("the token file could not be read again; the tokens read before stay in force")
	}
}

func (s *Store) reload(first bool) error {
	s.fileMu.Lock()
	defer s.fileMu.Unlock()
	st, err := stampOf(s.cfg.Path)
	if err != nil {
		return fmt.Errorf("read token file: %w", err)
	}
	f, err := ReadFile(s.cfg.Path)
	if err != nil {
		return err
	}
	by := make(map[string]Entry, len(f.Tokens))
	for _, e := range f.Tokens {
		by[e.SHA256] = e
	}
	s.mu.Lock()
	same := len(by) == len(s.byDigest)
	for d := range by {
		_, had := s.byDigest[d]
		same = same && had
	}
	s.byDigest, s.stamp, s.plain = by, st, f.Plain
	watchers := slices.Clone(s.watchers)
	s.mu.Unlock()
	if !first {
		// The server's own writes of the last use change no token.
		ev := s.log.Info()
		if same {
			ev = s.log.Debug()
		}
		ev.Int("tokens", len(by)).Msg("the token file changed; read it again")
		for _, w := range watchers {
			w()
		}
	}
	return nil
}

// Authenticate is who token is, if the file holds it, reading the file
// again first if it changed: a token revoked a moment ago is refused.
func (s *Store) Authenticate(token string) (Identity, bool) {
	s.refresh()
	d := Digest(token)
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.byDigest[d]
	if !ok {
		return Identity{}, false
	}
	if s.cfg.Path != "" {
		s.used[d] = s.cfg.Now()
	}
	return Identity{Name: e.Name, ID: d, Persons: slices.Clone(e.Persons)}, true
}

// Valid reports whether the token of id is still in the file as it was
// last read.
func (s *Store) Valid(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.byDigest[id]
	return ok
}

// flush writes the tokens' last use to the file.
func (s *Store) flush() {
	s.mu.Lock()
	used := s.used
	s.used = map[string]time.Time{}
	s.mu.Unlock()
	if len(used) == 0 {
		return
	}
	err := s.edit(func(f *File) error {
		for i, e := range f.Tokens {
			if t, ok := used[e.SHA256]; ok && t.After(e.LastUsed) {
				f.Tokens[i].LastUsed = t.UTC().Truncate(time.Second)
			}
		}
		return nil
	})
	if err != nil {
		s.log.Warn().Err(err).Msg("the tokens' last use could not be written to the token file")
	}
}

// edit changes the file (Edit) and reads it again at once.
func (s *Store) edit(change func(*File) error) error {
	if s.cfg.Path == "" {
		return errors.New("these tokens are fixed; they cannot be changed")
	}
	s.fileMu.Lock()
	err := Edit(s.cfg.Path, change)
	s.fileMu.Unlock()
	if err != nil {
		return err
	}
	s.refresh()
	return nil
}

// Token describes a token for listings: never the token or its digest.
type Token struct {
	Name     string    `json:"name"`
	Persons  []string  `json:"persons"`
	Created  time.Time `json:"created,omitzero"`
	LastUsed time.Time `json:"last_used,omitzero"`
}

// List describes the tokens that may act as person (every token when
// person is empty), by name, with their last use as this server saw it.
func (s *Store) List(person string) []Token {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Token
	for d, e := range s.byDigest {
		if person != "" && !slices.Contains(e.Persons, person) {
			continue
		}
		t := Token{Name: e.Name, Persons: slices.Clone(e.Persons), Created: e.Created, LastUsed: e.LastUsed}
		if u, ok := s.used[d]; ok && u.After(t.LastUsed) {
			t.LastUsed = u.UTC().Truncate(time.Second)
		}
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Revoke removes the token named name from the file, if it acts as
// person alone (a token of several persons is the server owner's to
// revoke, with `major token revoke`); an empty person revokes any.
func (s *Store) Revoke(person, name string) error {
	return s.edit(func(f *File) error {
		i := f.find(name)
		if i < 0 {
			return fmt.Errorf("%w: %q", ErrNotFound, name)
		}
		if person != "" && !slices.Equal(f.Tokens[i].Persons, []string{person}) {
			if !slices.Contains(f.Tokens[i].Persons, person) {
				return fmt.Errorf("%w: %q", ErrNotFound, name)
			}
			return fmt.Errorf("%w: %q acts as others too; the server's owner revokes it with major token revoke", ErrShared, name)
		}
		return f.Revoke(name)
	})
}

// ErrShared is a token a person may not revoke: it acts as others too.
var ErrShared = errors.New("a shared token")

// Persons lists every person some token may act as, sorted.
func (s *Store) Persons() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, e := range s.byDigest {
		for _, p := range e.Persons {
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	sort.Strings(out)
	return out
}

func (s *Store) entries() []Entry {
	var out []Entry
	for _, e := range s.byDigest {
		out = append(out, e)
	}
	return out
}
