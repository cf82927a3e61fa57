package auth

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/majorhq/major/internal/atomicfile"
	"github.com/majorhq/major/vault"
)

// Sentinel errors of the token file.
var (
	// ErrNotFound is a token name the file does not hold.
	ErrNotFound = errors.New("no such token")
	// ErrNameTaken is a new token's name that another token has.
	ErrNameTaken = errors.New("a token of that name exists")
	// ErrBadName is a token name that is empty, too long, not printable
	// or holds a slash.
	ErrBadName = errors.New("a token's name is 1 to 64 printable characters, without a slash")
)

// Entry is one token of the file: never the token itself, only its
// SHA-256 digest (a token is 32 random bytes, so a digest cannot be
// reversed by trying likely tokens).
type Entry struct {
	// Name says whose device or program the token is ("Pixel 8"); tokens
	// are revoked by it.
	Name string `json:"name"`
	// SHA256 is the hex digest of the token.
	SHA256 string `json:"sha256"`
	// Persons are who the token may act as.
	Persons []string `json:"persons"`
	// Created is when the token was made; zero for a token written by
	// hand in the plain format.
	Created time.Time `json:"created,omitzero"`
	// LastUsed is when the server last accepted the token (recorded
	// within a minute, see Store).
	LastUsed time.Time `json:"last_used,omitzero"`
}

// File is the token file's content.
type File struct {
	Tokens []Entry `json:"tokens"`
	// Plain says the file on disk is in the hand-written format
	// {"tokens": {"<token>": ["person"]}}: it holds tokens in plain text
	// and is rewritten hashed by the next change.
	Plain bool `json:"-"`
}

// Digest is the hex SHA-256 of a token, as the file keeps it.
func Digest(token string) string {
	d := sha256.Sum256([]byte(token))
	return hex.EncodeToString(d[:])
}

// NewToken makes a token: "mj_" and 32 random bytes, base64url.
func NewToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return "mj_" + base64.RawURLEncoding.EncodeToString(b)
}

// ReadFile reads a token file in either format.
func ReadFile(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read token file: %w", err)
	}
	f, err := parse(b)
	if err != nil {
		return nil, fmt.Errorf("token file %s: %w", path, err)
	}
	return f, nil
}

func parse(b []byte) (*File, error) {
	var raw struct {
		Tokens json.RawMessage `json:"tokens"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	f := &File{}
	switch t := bytes.TrimSpace(raw.Tokens); {
	case len(t) == 0 || string(t) == "null":
	case t[0] == '{':
		// The hand-written format: token -> persons.
		var plain map[string][]string
		if err := json.Unmarshal(t, &plain); err != nil {
			return nil, fmt.Errorf("tokens: %w", err)
		}
		f.Plain = true
		for tok, persons := range plain {
			if strings.TrimSpace(tok) == "" {
				return nil, errors.New("an empty token")
			}
			d := Digest(tok)
			f.Tokens = append(f.Tokens, Entry{Name: "token-" + d[:8], SHA256: d, Persons: persons})
		}
		slices.SortFunc(f.Tokens, func(a, b Entry) int { return strings.Compare(a.Name, b.Name) })
	default:
		dec := json.NewDecoder(bytes.NewReader(t))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&f.Tokens); err != nil {
			return nil, fmt.Errorf("tokens: %w", err)
		}
	}
	return f, f.check()
}

// check is what every token of a file must be.
func (f *File) check() error {
	names := map[string]bool{}
	for _, e := range f.Tokens {
		if err := checkName(e.Name); err != nil {
			return fmt.Errorf("token %q: %w", e.Name, err)
		}
		if names[e.Name] {
			return fmt.Errorf("two tokens are named %q", e.Name)
		}
		names[e.Name] = true
		if d, err := hex.DecodeString(e.SHA256); err != nil || len(d) != sha256.Size {
			return fmt.Errorf("token %q: sha256 is not a SHA-256 digest in hex", e.Name)
		}
		if len(e.Persons) == 0 {
			return fmt.Errorf("token %q acts as no person", e.Name)
		}
		for _, p := range e.Persons {
			if !vault.ValidPerson(p) {
				return fmt.Errorf("token %q: person %q is not a plain lowercase name", e.Name, p)
			}
		}
	}
	return nil
}

func checkName(name string) error {
	if name == "" || len(name) > 64 || strings.TrimSpace(name) != name {
		return ErrBadName
	}
	for _, r := range name {
		// A name is a path element of DELETE /api/claude/tokens/{name}.
		if r < 0x20 || r == 0x7f || r == '/' {
			return ErrBadName
		}
	}
	return nil
}

// find is the index of the token named name, or -1.
func (f *File) find(name string) int {
	return slices.IndexFunc(f.Tokens, func(e Entry) bool { return e.Name == name })
}

// Add adds a new token for persons under name and returns it: the only
// time it is ever seen.
func (f *File) Add(name string, persons []string, now time.Time) (string, error) {
	if err := checkName(name); err != nil {
		return "", err
	}
	if f.find(name) >= 0 {
		return "", fmt.Errorf("%w: %q", ErrNameTaken, name)
	}
	if len(persons) == 0 {
		return "", errors.New("a token acts as at least one person")
	}
	for _, p := range persons {
		if !vault.ValidPerson(p) {
			return "", fmt.Errorf("person %q is not a plain lowercase name", p)
		}
	}
	tok := NewToken()
	f.Tokens = append(f.Tokens, Entry{Name: name, SHA256: Digest(tok), Persons: slices.Clone(persons), Created: now.UTC().Truncate(time.Second)})
	return tok, nil
}

// FreeName is name, or name with " 2", " 3" ... after it when a token has
// that name already.
func (f *File) FreeName(name string) string {
	if f.find(name) < 0 {
		return name
	}
	for i := 2; ; i++ {
		if n := fmt.Sprintf("%s %d", name, i); f.find(n) < 0 {
			return n
		}
	}
}

// Revoke removes the token named name.
func (f *File) Revoke(name string) error {
	i := f.find(name)
	if i < 0 {
		return fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	f.Tokens = slices.Delete(f.Tokens, i, i+1)
	return nil
}

// Edit changes the token file at path under an exclusive lock, so the
// server and `major token` never lose each other's changes: it reads the
// file (a missing one is empty), calls change, and writes the result,
// hashed, in place of the old file at once (never half written). A
// change that returns an error writes nothing.
func Edit(path string, change func(*File) error) error {
	lock, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("lock token file: %w", err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("lock token file: %w", err)
	}
	f, err := ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		f, err = &File{}, nil
	}
	if err != nil {
		return err
	}
	if err := change(f); err != nil {
		return err
	}
	return write(path, f)
}

// write replaces the file at path with f in the hashed format, readable
// by its owner only.
func write(path string, f *File) error {
	if f.Tokens == nil {
		f.Tokens = []Entry{}
	}
	b, err := json.MarshalIndent(struct {
		Tokens []Entry `json:"tokens"`
	}{f.Tokens}, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(path, append(b, '\n')); err != nil {
		return fmt.Errorf("write token file: %w", err)
	}
	f.Plain = false
	return nil
}
