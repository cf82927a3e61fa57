// Package vault owns the notes vault on disk: the rule for person names
// (each person is one folder of the vault root, and some folder names are
// the server's own), the guard that keeps a person's file tools inside
// their folder and away from the names that configure the assistant or
// git, the one GitSync through which every write to the vault repository
// is committed, pulled and pushed (with the write leases that keep file
// tools and pulls apart, the recovery from a killed git call, and Explain
// for the person), and the one way an audit log line is appended and
// committed.
//
// It knows nothing of the CLI, its hook protocol, HTTP or MCP: it must not
// import the packages that answer them (hooks, relay, mcpserver); they
// call into it.
package vault

import (
	"errors"
	"fmt"
	"regexp"
)

// AuditDir is the vault root's folder for the server's audit logs. It sits
// next to the persons' folders, outside every one of them, so the model
// (confined by the Guard) cannot edit a log; no person may be named after
// it.
const AuditDir = "claude"

// personName is a plain lowercase name: it becomes a folder name, so no
// slashes, dots or anything else that could walk out of the vault root.
var personName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,63}$`)

// ValidPerson reports whether name is a plain lowercase person name
// (a letter, then up to 63 letters, digits, '_' or '-'). A valid name may
// still be reserved; CheckPerson says whether it can be served.
func ValidPerson(name string) bool { return personName.MatchString(name) }

// Reserved reports whether name is a folder of the vault root the server
// writes itself (the audit logs): a person with that name would get the
// logs as their vault, and could rewrite them.
func Reserved(name string) bool { return name == AuditDir }

// ErrPersonName is a person name that is not a plain lowercase name.
var ErrPersonName = errors.New("not a plain lowercase name")

// CheckPerson returns nil when name can be a person's folder: a valid
// name that is not reserved.
func CheckPerson(name string) error {
	if !ValidPerson(name) {
		return fmt.Errorf("person %q is %w", name, ErrPersonName)
	}
	if Reserved(name) {
		return fmt.Errorf("person %q cannot be served: the vault folder %s/ holds the server's audit logs; rename the person", name, name)
	}
	return nil
}
