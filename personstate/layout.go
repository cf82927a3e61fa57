// Package personstate keeps everything the server holds of one person in
// one folder of the state directory, persons/<name>/, so that moving a
// person to another server is moving one folder:
//
//	persons/<name>/sessions/<id>/      their chats: index entry and event log (sessionstore)
//	persons/<name>/home/               their CLI home, with the CLI's transcripts (clihome)
//	persons/<name>/usage.json          what their turns used per day (usage)
//	persons/<name>/notify/             their devices and notification settings (notify)
//	persons/<name>/linkedin-unconfirmed.json  their publishes LinkedIn left open (mcpserver)
//
// It owns that layout (the packages that write the files ask it where
// they go), moving a state directory of the earlier layout (one file for
// everyone) into it, and the person archive: a person's folder written as
// one file and taken in again on another server (Export, Import). It
// knows the files' names and, for the move from the earlier layout, how
// those files named their persons; it does not read or write them while
// the server runs.
package personstate

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/majorhq/major/vault"
)

// The names in a person's folder.
const (
	// SessionsDir holds one folder per chat session.
	SessionsDir = "sessions"
	// HomeDir is the person's CLI home.
	HomeDir = "home"
	// UsageFile is the person's usage per day.
	UsageFile = "usage.json"
	// NotifyDir holds the person's devices (DevicesFile) and the
	// notification settings they chose (SettingsFile).
	NotifyDir    = "notify"
	DevicesFile  = "devices.json"
	SettingsFile = "settings.json"
	// UnconfirmedFile is the person's LinkedIn publishes whose outcome
	// LinkedIn left open.
	UnconfirmedFile = "linkedin-unconfirmed.json"
)

// personsDir is the state directory's folder of persons.
const personsDir = "persons"

// Dir is person's folder in stateDir.
func Dir(stateDir, person string) string {
	return filepath.Join(stateDir, personsDir, person)
}

// File is name (one of the names above, or a path below them) in
// person's folder.
func File(stateDir, person string, name ...string) string {
	return filepath.Join(append([]string{Dir(stateDir, person)}, name...)...)
}

// List is the persons who have a folder in stateDir, sorted; folders
// whose name is no person's (a move's staging folder) are left out.
func List(stateDir string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(stateDir, personsDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list the persons of %s: %w", stateDir, err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && vault.ValidPerson(e.Name()) {
			out = append(out, e.Name())
		}
	}
	slices.Sort(out)
	return out, nil
}

// State is what a person's folder holds that is theirs: the server makes
// an empty home for everyone it may serve, so an empty folder is no
// person's state.
type State struct {
	// Sessions is how many chats they have.
	Sessions int
	// Conversations is how many CLI transcripts their home holds.
	Conversations int
	// Usage, Devices and Unconfirmed tell whether those files exist.
	Usage, Devices, Unconfirmed bool
	// Bytes is the folder's size.
	Bytes int64
}

// Empty reports whether s holds nothing of the person's.
func (s State) Empty() bool {
	return s.Sessions == 0 && s.Conversations == 0 && !s.Usage && !s.Devices && !s.Unconfirmed
}

// String says what s holds, for people.
func (s State) String() string {
	if s.Empty() {
		return "nothing"
	}
	var parts []string
	parts = append(parts, fmt.Sprintf("%d chats", s.Sessions), fmt.Sprintf("%d CLI conversations", s.Conversations))
	for name, has := range map[string]bool{"usage": s.Usage, "devices": s.Devices, "unconfirmed LinkedIn publishes": s.Unconfirmed} {
		if has {
			parts = append(parts, name)
		}
	}
	slices.Sort(parts[2:])
	return strings.Join(parts, ", ")
}

// Inspect tells what dir, a person's folder, holds.
func Inspect(dir string) (State, error) {
	var s State
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if entries, err := os.ReadDir(filepath.Join(dir, SessionsDir)); err == nil {
		for _, e := range entries {
			if e.IsDir() {
				s.Sessions++
			}
		}
	}
	s.Usage = exists(filepath.Join(dir, UsageFile))
	s.Unconfirmed = exists(filepath.Join(dir, UnconfirmedFile))
	s.Devices = exists(filepath.Join(dir, NotifyDir, DevicesFile)) || exists(filepath.Join(dir, NotifyDir, SettingsFile))
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		if info, err := d.Info(); err == nil {
			s.Bytes += info.Size()
		}
		// The CLI keeps a transcript per conversation under
		// projects/<folder>/ of its configuration directory.
		if strings.HasSuffix(p, ".jsonl") && filepath.Base(filepath.Dir(filepath.Dir(p))) == "projects" {
			s.Conversations++
		}
		return nil
	})
	if err != nil {
		return s, fmt.Errorf("look into %s: %w", dir, err)
	}
	return s, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
