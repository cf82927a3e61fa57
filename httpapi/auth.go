package httpapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/majorhq/major/vault"
)

// Auth maps bearer tokens to the persons they may act as. Tokens are kept
// only as SHA-256 digests and compared in constant time.
type Auth struct {
	entries []authEntry
}

type authEntry struct {
	digest  [sha256.Size]byte
	persons map[string]bool
}

// NewAuth builds an Auth from token -> persons.
func NewAuth(tokens map[string][]string) (*Auth, error) {
	a := &Auth{}
	for tok, persons := range tokens {
		if strings.TrimSpace(tok) == "" {
			return nil, fmt.Errorf("auth: empty token")
		}
		e := authEntry{digest: sha256.Sum256([]byte(tok)), persons: map[string]bool{}}
		for _, p := range persons {
			if !vault.ValidPerson(p) {
				return nil, fmt.Errorf("auth: person %q is not a plain lowercase name", p)
			}
			e.persons[p] = true
		}
		a.entries = append(a.entries, e)
	}
	return a, nil
}

// LoadAuth reads an auth file: {"tokens": {"<token>": ["sebastian", ...]}}.
func LoadAuth(path string) (*Auth, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read auth file: %w", err)
	}
	var f struct {
		Tokens map[string][]string `json:"tokens"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("parse auth file %s: %w", path, err)
	}
	if len(f.Tokens) == 0 {
		return nil, fmt.Errorf("auth file %s has no tokens", path)
	}
	return NewAuth(f.Tokens)
}

// persons returns the persons token may act as, or nil for an unknown
// token. Every entry is compared, so timing does not tell which matched.
func (a *Auth) persons(token string) map[string]bool {
	d := sha256.Sum256([]byte(token))
	var found map[string]bool
	for i := range a.entries {
		if subtle.ConstantTimeCompare(d[:], a.entries[i].digest[:]) == 1 {
			found = a.entries[i].persons
		}
	}
	return found
}

// Persons lists every person some token may act as, sorted.
func (a *Auth) Persons() []string {
	seen := map[string]bool{}
	var out []string
	for _, e := range a.entries {
		for p := range e.persons {
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	sort.Strings(out)
	return out
}
