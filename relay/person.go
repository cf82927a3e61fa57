package relay

import "regexp"

// personName is a plain lowercase name: it becomes a folder name, so no
// slashes, dots or anything else that could walk out of the vault root.
var personName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,63}$`)

// ValidPerson reports whether name is a plain lowercase person name.
func ValidPerson(name string) bool { return personName.MatchString(name) }
