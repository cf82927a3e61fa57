package personstate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/internal/atomicfile"
	"github.com/majorhq/major/vault"
)

// Migrate moves what a server of the earlier layout kept for all persons
// together into each person's folder:
//
//	sessions/<id>/               → persons/<person>/sessions/<id>/ (the person from its meta.json)
//	usage.json                   → persons/<person>/usage.json (each person's days)
//	notify/devices.json          → persons/<person>/notify/devices.json
//	notify/settings.json         → persons/<person>/notify/settings.json
//	linkedin-unconfirmed.json    → persons/<person>/linkedin-unconfirmed.json
//
// The CLI homes were each person's already. It is safe to run at every
// start and after a crash half way: every person's file is written whole
// (atomically) before the shared one is removed, and a person's file
// that exists already is kept. What names no valid person stays where it
// is, and is logged. It returns how many things moved.
func Migrate(stateDir string, log zerolog.Logger) (int, error) {
	var moved int
	var errs []error
	for _, step := range []func(string, zerolog.Logger) (int, error){migrateSessions, migrateUsage, migrateDevices, migrateSettings, migrateUnconfirmed} {
		n, err := step(stateDir, log)
		moved += n
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return moved, fmt.Errorf("move the state of %s into the persons' folders: %w", stateDir, err)
	}
	if moved > 0 {
		log.Info().Int("moved", moved).Str("state_dir", stateDir).Msg("moved the state kept for all persons together into each person's folder (persons/<name>/)")
	}
	return moved, nil
}

// migrateSessions moves each session's folder into its person's.
func migrateSessions(stateDir string, log zerolog.Logger) (int, error) {
	old := filepath.Join(stateDir, "sessions")
	entries, err := os.ReadDir(old)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	moved := 0
	var errs []error
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		src := filepath.Join(old, e.Name())
		var meta struct {
			ID     string `json:"id"`
			Person string `json:"person"`
		}
		b, err := os.ReadFile(filepath.Join(src, "meta.json"))
		if err == nil {
			err = json.Unmarshal(b, &meta)
		}
		if err != nil || meta.ID != e.Name() || !vault.ValidPerson(meta.Person) {
			// The earlier server skipped such a folder too.
			log.Warn().Str("dir", src).Msg("a session folder without a valid index entry is left where it is")
			continue
		}
		dst := File(stateDir, meta.Person, SessionsDir, e.Name())
		if exists(dst) {
			errs = append(errs, fmt.Errorf("session %s is in both %s and %s; the first is left where it is", e.Name(), src, dst))
			continue
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := os.Rename(src, dst); err != nil {
			errs = append(errs, err)
			continue
		}
		moved++
	}
	_ = os.Remove(old) // only once it is empty
	return moved, errors.Join(errs...)
}

// migrateUsage splits usage.json ({person: {date: day}}) into each
// person's {date: day}.
func migrateUsage(stateDir string, log zerolog.Logger) (int, error) {
	return splitFile(stateDir, "usage.json", log, func(b []byte) (map[string][]byte, error) {
		var all map[string]json.RawMessage
		if err := json.Unmarshal(b, &all); err != nil {
			return nil, err
		}
		out := map[string][]byte{}
		for p, days := range all {
			out[p] = days
		}
		return out, nil
	}, UsageFile)
}

// migrateDevices splits notify/devices.json (a list of devices, each
// naming its person) into each person's list.
func migrateDevices(stateDir string, log zerolog.Logger) (int, error) {
	return splitFile(stateDir, filepath.Join(NotifyDir, DevicesFile), log, func(b []byte) (map[string][]byte, error) {
		return splitList(b, func(raw json.RawMessage) (json.RawMessage, string, error) {
			var d struct {
				Person string `json:"person"`
			}
			err := json.Unmarshal(raw, &d)
			return raw, d.Person, err
		})
	}, NotifyDir, DevicesFile)
}

// migrateSettings splits notify/settings.json ({person: settings}) into
// each person's settings.
func migrateSettings(stateDir string, log zerolog.Logger) (int, error) {
	return splitFile(stateDir, filepath.Join(NotifyDir, SettingsFile), log, func(b []byte) (map[string][]byte, error) {
		var all map[string]json.RawMessage
		if err := json.Unmarshal(b, &all); err != nil {
			return nil, err
		}
		out := map[string][]byte{}
		for p, s := range all {
			out[p] = s
		}
		return out, nil
	}, NotifyDir, SettingsFile)
}

// migrateUnconfirmed splits linkedin-unconfirmed.json ({"unconfirmed":
// [{person, key, sent}]}) into each person's file of the same shape.
func migrateUnconfirmed(stateDir string, log zerolog.Logger) (int, error) {
	return splitFile(stateDir, UnconfirmedFile, log, func(b []byte) (map[string][]byte, error) {
		var f struct {
			Unconfirmed json.RawMessage `json:"unconfirmed"`
		}
		if err := json.Unmarshal(b, &f); err != nil {
			return nil, err
		}
		lists, err := splitList(f.Unconfirmed, func(raw json.RawMessage) (json.RawMessage, string, error) {
			var e struct {
				Person string `json:"person"`
			}
			err := json.Unmarshal(raw, &e)
			return raw, e.Person, err
		})
		if err != nil {
			return nil, err
		}
		for p, list := range lists {
			lists[p] = []byte(`{"unconfirmed":` + string(list) + `}`)
		}
		return lists, nil
	}, UnconfirmedFile)
}

// splitList groups a JSON list's elements by the person each names.
func splitList(b []byte, person func(json.RawMessage) (json.RawMessage, string, error)) (map[string][]byte, error) {
	var list []json.RawMessage
	if len(b) > 0 {
		if err := json.Unmarshal(b, &list); err != nil {
			return nil, err
		}
	}
	groups := map[string][]json.RawMessage{}
	for _, raw := range list {
		el, p, err := person(raw)
		if err != nil {
			return nil, err
		}
		groups[p] = append(groups[p], el)
	}
	out := map[string][]byte{}
	for p, els := range groups {
		b, err := json.MarshalIndent(els, "", "  ")
		if err != nil {
			return nil, err
		}
		out[p] = b
	}
	return out, nil
}

// splitFile writes each person's part of the shared file rel (split
// tells the parts) to their folder at name, then removes the shared file:
// every part is on disk before it goes. A part for a name that is no
// valid person's keeps the shared file, so nothing is lost.
func splitFile(stateDir, rel string, log zerolog.Logger, split func([]byte) (map[string][]byte, error), name ...string) (int, error) {
	src := filepath.Join(stateDir, rel)
	b, err := os.ReadFile(src)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	parts, err := split(b)
	if err != nil {
		return 0, fmt.Errorf("%s does not parse: %w", src, err)
	}
	persons := make([]string, 0, len(parts))
	for p := range parts {
		persons = append(persons, p)
	}
	slices.Sort(persons)
	moved, keep := 0, false
	for _, p := range persons {
		if !vault.ValidPerson(p) {
			log.Warn().Str("file", src).Str("person", p).Msg("an entry of a name that is no person's is left in the shared file")
			keep = true
			continue
		}
		dst := File(stateDir, p, name...)
		if exists(dst) {
			// Written by a start that stopped before removing the shared
			// file, or by this server since: the person's own wins.
			continue
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
			return moved, err
		}
		if err := atomicfile.Write(dst, parts[p]); err != nil {
			return moved, fmt.Errorf("write %s: %w", dst, err)
		}
		moved++
	}
	if keep {
		return moved, nil
	}
	if err := os.Remove(src); err != nil {
		return moved, err
	}
	return moved, atomicfile.SyncDir(filepath.Dir(src))
}
