package linkedin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"sort"
	"strings"

	"github.com/majorhq/major/vault"
)

// Account is what one person needs to act on LinkedIn: an OAuth access token
// with the w_member_social scope and the URN of the member (or organization)
// the token acts as.
type Account struct {
	AccessToken string `json:"access_token"`
	Author      string `json:"author"`
}

// String never shows the token, so an Account can be logged or printed by
// mistake without leaking it.
func (a Account) String() string {
	return fmt.Sprintf("linkedin.Account{Author: %q, AccessToken: [redacted]}", a.Author)
}

// GoString redacts the token for %#v as well.
func (a Account) GoString() string { return a.String() }

// Accounts maps a person (the vault folder name) to their LinkedIn account.
type Accounts map[string]Account

// Persons lists the configured persons in order.
func (a Accounts) Persons() []string {
	out := make([]string, 0, len(a))
	for p := range a {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

var authorURN = regexp.MustCompile(`^urn:li:(person|member|organization):[A-Za-z0-9_-]+$`)

// LoadConfig reads the per-person LinkedIn config file, a JSON object such as
//
//	{"sebastian": {"access_token": "...", "author": "urn:li:person:abc"}}
//
// A path of "" or a file that does not exist means LinkedIn is not set up for
// anyone: LoadConfig returns an empty Accounts and no error, and the tools
// then tell the model so. A file that exists but is malformed is an error,
// because silently ignoring it would hide a broken deployment.
func LoadConfig(path string) (Accounts, error) {
	if path == "" {
		return Accounts{}, nil
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Accounts{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read linkedin config: %w", err)
	}
	var accts Accounts
	if err := json.Unmarshal(data, &accts); err != nil {
		return nil, fmt.Errorf("parse linkedin config %s: %w", path, err)
	}
	if accts == nil {
		accts = Accounts{}
	}
	if err := accts.Validate(); err != nil {
		return nil, fmt.Errorf("linkedin config %s: %w", path, err)
	}
	return accts, nil
}

// Validate checks every entry: a valid person name (vault.ValidPerson), a
// token, and an author URN. The error names the person, never the token.
func (a Accounts) Validate() error {
	var errs []error
	for _, person := range a.Persons() {
		acct := a[person]
		if !vault.ValidPerson(person) {
			errs = append(errs, fmt.Errorf("person %q: not a valid person name", person))
		}
		if strings.TrimSpace(acct.AccessToken) == "" {
			errs = append(errs, fmt.Errorf("person %q: access_token is empty", person))
		}
		if !authorURN.MatchString(acct.Author) {
			errs = append(errs, fmt.Errorf("person %q: author %q is not a urn:li:person:… or urn:li:organization:… URN", person, acct.Author))
		}
	}
	return errors.Join(errs...)
}
