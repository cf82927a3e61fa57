package auth

import (
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrBadCode is a pairing code that is unknown, used or expired: the same
// error for each, so a guess learns nothing.
var ErrBadCode = errors.New("the pairing code is not valid (it is used once, within 10 minutes of being made)")

// codeAlphabet is Crockford's base32: no I, L, O or U, so a code read off
// a screen and typed is not mistaken.
const codeAlphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// codeLength is a code's characters: 50 bits, which the failed-attempt
// limit leaves no time to guess in the 10 minutes a code lives.
const codeLength = 10

// pairing is a code waiting for its device.
type pairing struct {
	person  string
	name    string
	expires time.Time
}

// Pairing is a new pairing code, for a device to redeem within its time.
type Pairing struct {
	// Code is the one-time secret, shown as XXXXX-XXXXX.
	Code    string
	Person  string
	Name    string
	Expires time.Time
}

// Pair makes a pairing code that gives one device a token of its own for
// person, named name (made unique when redeemed).
func (s *Store) Pair(person, name string) (Pairing, error) {
	if s.cfg.Path == "" {
		return Pairing{}, errors.New("these tokens are fixed; no device can be paired")
	}
	if err := checkName(name); err != nil {
		return Pairing{}, err
	}
	b := make([]byte, codeLength)
	_, _ = rand.Read(b)
	code := make([]byte, codeLength)
	for i, v := range b {
		code[i] = codeAlphabet[int(v)%len(codeAlphabet)] // 256 is a multiple of 32: no bias
	}
	now := s.cfg.Now()
	p := pairing{person: person, name: name, expires: now.Add(s.cfg.PairingTTL)}
	s.mu.Lock()
	defer s.mu.Unlock()
	for c, q := range s.pairings {
		if !now.Before(q.expires) {
			delete(s.pairings, c)
		}
	}
	s.pairings[string(code)] = p
	return Pairing{Code: FormatCode(string(code)), Person: person, Name: name, Expires: p.expires}, nil
}

// FormatCode shows a code in two halves, as people read and type it.
func FormatCode(code string) string {
	if len(code) != codeLength {
		return code
	}
	return code[:codeLength/2] + "-" + code[codeLength/2:]
}

// normalCode is a typed code as it was made: upper case, without dashes
// or spaces, with the letters people mistake for digits read as those.
func normalCode(typed string) string {
	var b strings.Builder
	for _, r := range strings.ToUpper(typed) {
		switch {
		case r == 'O':
			r = '0'
		case r == 'I' || r == 'L':
			r = '1'
		case r == '-' || r == ' ':
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Redeem uses a pairing code, once: it adds a token for the code's person
// to the file and returns it with its identity. name, when given,
// replaces the name the code was made with.
func (s *Store) Redeem(code, name string) (string, Identity, error) {
	code = normalCode(code)
	now := s.cfg.Now()
	s.mu.Lock()
	p, ok := s.pairings[code]
	if ok {
		delete(s.pairings, code) // single use, even if what follows fails
	}
	s.mu.Unlock()
	if !ok || !now.Before(p.expires) {
		return "", Identity{}, ErrBadCode
	}
	if name == "" {
		name = p.name
	}
	if err := checkName(name); err != nil {
		return "", Identity{}, err
	}
	var tok string
	err := s.edit(func(f *File) error {
		var err error
		name = f.FreeName(name)
		tok, err = f.Add(name, []string{p.person}, now)
		return err
	})
	if err != nil {
		return "", Identity{}, fmt.Errorf("add the paired device's token: %w", err)
	}
	s.log.Info().Str("person", p.person).Str("token_name", name).Msg("a device was paired")
	return tok, Identity{Name: name, ID: Digest(tok), Persons: []string{p.person}}, nil
}
