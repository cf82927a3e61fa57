package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/vault"
)

// maxFileSize bounds every file of a layer.
const maxFileSize = 1 << 20

// ServerLayer and PersonsDir are the layers' folders under the
// configuration directory: server/ and persons/<person>/.
const (
	ServerLayer = "server"
	PersonsDir  = "persons"
)

// Config configures a Store.
type Config struct {
	// Dir is the configuration directory; it need not exist.
	Dir string
	// Vault is the vault repository: nothing in it is ever read, and Dir
	// must not be inside it.
	Vault string
	Rules Rules
	// Logger gets each broken file (path and reason) and each reload.
	Logger zerolog.Logger
}

// Problem is a file whose configuration is not in force.
type Problem struct {
	Path   string
	Reason string
}

func (p Problem) Error() string { return p.Path + ": " + p.Reason }

// Store hands out each person's configuration, read again for a new
// session when a file of theirs or the server's changed (a few stat calls
// tell). A layer whose files are broken keeps its last good configuration
// in force; Problems lists the broken files. It is safe for concurrent use.
type Store struct {
	cfg   Config
	vault string // real path
	log   zerolog.Logger

	mu     sync.Mutex
	layers map[string]*layerState // by folder relative to Dir
}

type layerState struct {
	stamp   string
	good    Layer
	problem *Problem
}

// Open checks that the configuration directory is outside the vault and
// reads the server's layer and every person's layer there: a broken file
// is an error naming it, so a server never starts with a configuration
// other than the one written.
func Open(cfg Config) (*Store, error) {
	root, err := vault.Resolve(cfg.Vault)
	if err != nil {
		return nil, err
	}
	dir, err := vault.Resolve(cfg.Dir)
	if err != nil {
		return nil, err
	}
	if vault.Within(root, dir) || vault.Within(dir, root) {
		return nil, fmt.Errorf("configuration directory %s overlaps the vault repository %s, which the agent and every pushed commit can write; keep it outside", cfg.Dir, cfg.Vault)
	}
	if !filepath.IsAbs(cfg.Rules.MCPWorkDir) {
		return nil, fmt.Errorf("the MCP servers' working directory %q is not an absolute path", cfg.Rules.MCPWorkDir)
	}
	work, err := vault.Resolve(cfg.Rules.MCPWorkDir)
	if err != nil {
		return nil, fmt.Errorf("the MCP servers' working directory: %w", err)
	}
	if vault.Within(root, work) {
		return nil, fmt.Errorf("the MCP servers' working directory %s is in the vault repository %s", cfg.Rules.MCPWorkDir, cfg.Vault)
	}
	s := &Store{cfg: cfg, vault: root, log: cfg.Logger.With().Str("component", "config").Logger(), layers: map[string]*layerState{}}
	keys := []string{ServerLayer}
	ents, err := os.ReadDir(filepath.Join(cfg.Dir, PersonsDir))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read %s: %w", filepath.Join(cfg.Dir, PersonsDir), err)
	}
	for _, e := range ents {
		keys = append(keys, filepath.Join(PersonsDir, e.Name()))
	}
	var errs []error
	for _, k := range keys {
		st := &layerState{}
		stamp, l, err := s.load(k)
		if err != nil {
			errs = append(errs, err)
		}
		st.stamp, st.good = stamp, l
		s.layers[k] = st
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("configuration in %s: %w", cfg.Dir, err)
	}
	return s, nil
}

// For is person's configuration for a new session, as the files are now,
// or as they last were good.
func (s *Store) For(person string) Person {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Merge(s.refresh(ServerLayer), s.refresh(filepath.Join(PersonsDir, person)))
}

// Limits are person's limits as the settings files are now, or as they
// last were good. The relay asks for them with every message, so only the
// two settings files are looked at (a stat each): the limits live there
// alone, and a changed one reads its whole layer again as For does.
func (s *Store) Limits(person string) Limits {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Merge(s.refreshSettings(ServerLayer), s.refreshSettings(filepath.Join(PersonsDir, person))).Limits
}

// Notifications are person's notification settings as the settings files
// are now, or as they last were good (as Limits, a stat of the two
// settings files each time).
func (s *Store) Notifications(person string) json.RawMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Merge(s.refreshSettings(ServerLayer), s.refreshSettings(filepath.Join(PersonsDir, person))).Notifications
}

// refreshSettings is refresh for readers of the settings file only: the
// layer as last read while its settings file is unchanged.
func (s *Store) refreshSettings(key string) Layer {
	if st := s.layers[key]; st != nil && st.stamp != "" {
		// The stamp's first line is the settings file's: files lists
		// it first.
		line, _, _ := strings.Cut(st.stamp, "\n")
		if fileStamp(filepath.Join(s.cfg.Dir, key, SettingsFile)) == line {
			return st.good
		}
	}
	return s.refresh(key)
}

// Check reads every layer again whose files changed, persons' folders made
// since included, and returns the broken files.
func (s *Store) Check() []Problem {
	s.mu.Lock()
	keys := []string{ServerLayer}
	for k := range s.layers {
		keys = append(keys, k)
	}
	ents, _ := os.ReadDir(filepath.Join(s.cfg.Dir, PersonsDir))
	for _, e := range ents {
		keys = append(keys, filepath.Join(PersonsDir, e.Name()))
	}
	for _, k := range keys {
		s.refresh(k)
	}
	s.mu.Unlock()
	return s.Problems()
}

// Problems are the broken files, as of the last For or Check of each
// layer.
func (s *Store) Problems() []Problem {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Problem
	for _, st := range s.layers {
		if st.problem != nil {
			out = append(out, *st.problem)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// refresh reads the layer in folder key again if its files changed and
// returns its configuration in force.
func (s *Store) refresh(key string) Layer {
	st := s.layers[key]
	if st == nil {
		st = &layerState{}
		s.layers[key] = st
	}
	stamp, err := s.stamp(key)
	if err == nil && stamp == st.stamp {
		return st.good
	}
	var l Layer
	if err == nil {
		stamp, l, err = s.load(key)
	}
	st.stamp = stamp
	if err != nil {
		p := Problem{Path: filepath.Join(s.cfg.Dir, key), Reason: err.Error()}
		var pe Problem
		if errors.As(err, &pe) {
			p = pe
		}
		if st.problem != nil && *st.problem == p {
			return st.good
		}
		st.problem = &p
		s.log.Error().Str("path", p.Path).Str("reason", p.Reason).
			Msg("configuration file is broken: the last good configuration of its folder stays in force")
		return st.good
	}
	if st.problem != nil {
		s.log.Info().Str("path", st.problem.Path).Msg("configuration file fixed")
	}
	s.log.Info().Str("layer", key).Msg("configuration read again")
	st.good, st.problem = l, nil
	return l
}

// files are the layer's files as they are now: the fixed ones and every
// skills/<name>/SKILL.md, sorted.
func (s *Store) files(key string) ([]string, error) {
	dir := filepath.Join(s.cfg.Dir, key)
	// The settings file comes first: refreshSettings reads its line of
	// the stamp.
	files := []string{filepath.Join(dir, SettingsFile), filepath.Join(dir, MCPFile), filepath.Join(dir, PromptFile)}
	skills := filepath.Join(dir, SkillsDir)
	if err := s.checkOutside(skills); err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(skills)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, Problem{Path: skills, Reason: err.Error()}
	}
	for _, e := range ents {
		files = append(files, filepath.Join(skills, e.Name(), SkillFile))
	}
	return files, nil
}

// stamp identifies the layer's files as they are: path, target, size,
// modification time and inode of each.
func (s *Store) stamp(key string) (string, error) {
	files, err := s.files(key)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, f := range files {
		b.WriteString(fileStamp(f))
		b.WriteByte('\n')
	}
	return b.String(), nil
}

// fileStamp is one line of a stamp: path, target, size, modification time
// and inode of file f, or its path and "-" if it cannot be looked at.
func fileStamp(f string) string {
	real, err := filepath.EvalSymlinks(f)
	if err != nil {
		return f + " -"
	}
	st, err := os.Stat(real)
	if err != nil {
		return f + " -"
	}
	return fmt.Sprintf("%s %s %d %d %v", f, real, st.Size(), st.ModTime().UnixNano(), inode(st))
}

// load reads the layer in folder key; a missing folder or file is an empty
// setting. It returns the stamp of what it read.
func (s *Store) load(key string) (string, Layer, error) {
	var l Layer
	stamp, err := s.stamp(key)
	if err != nil {
		return "", l, err
	}
	dir := filepath.Join(s.cfg.Dir, key)
	if data, err := s.read(filepath.Join(dir, SettingsFile)); err != nil {
		return stamp, l, err
	} else if data != nil {
		if err := parseSettings(data, s.cfg.Rules, &l); err != nil {
			return stamp, l, Problem{Path: filepath.Join(dir, SettingsFile), Reason: err.Error()}
		}
	}
	if data, err := s.read(filepath.Join(dir, MCPFile)); err != nil {
		return stamp, l, err
	} else if data != nil {
		if err := parseMCP(data, s.cfg.Rules, s.outsideVault, &l); err != nil {
			return stamp, l, Problem{Path: filepath.Join(dir, MCPFile), Reason: err.Error()}
		}
	}
	if data, err := s.read(filepath.Join(dir, PromptFile)); err != nil {
		return stamp, l, err
	} else {
		l.Prompt = string(data)
	}
	files, err := s.files(key)
	if err != nil {
		return stamp, l, err
	}
	for _, f := range files[3:] {
		name := filepath.Base(filepath.Dir(f))
		if !skillPattern.MatchString(name) {
			return stamp, l, Problem{Path: filepath.Dir(f), Reason: "a skill's folder name is lowercase letters, digits, - and _"}
		}
		data, err := s.read(f)
		if err != nil {
			return stamp, l, err
		}
		if data == nil {
			return stamp, l, Problem{Path: f, Reason: "missing: a skill is a folder with a SKILL.md"}
		}
		if err := checkSkill(name, data); err != nil {
			return stamp, l, Problem{Path: f, Reason: err.Error()}
		}
		l.Skills = append(l.Skills, Skill{Name: name, Content: data})
	}
	return stamp, l, nil
}

// read returns the file at path, nil if there is none. A file that is in
// the vault (through a symbolic link of its own or of a folder above it),
// is not a regular file or is too large is a Problem.
func (s *Store) read(path string) ([]byte, error) {
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err := s.checkOutside(path); err != nil {
		return nil, err
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, Problem{Path: path, Reason: err.Error()}
	}
	st, err := os.Stat(real)
	switch {
	case err != nil:
		return nil, Problem{Path: path, Reason: err.Error()}
	case !st.Mode().IsRegular():
		return nil, Problem{Path: path, Reason: "not a regular file"}
	case st.Size() > maxFileSize:
		return nil, Problem{Path: path, Reason: fmt.Sprintf("larger than %d bytes", maxFileSize)}
	}
	data, err := os.ReadFile(real)
	if err != nil {
		return nil, Problem{Path: path, Reason: err.Error()}
	}
	if data == nil {
		data = []byte{}
	}
	return data, nil
}

// checkOutside refuses a path that resolves into the vault.
func (s *Store) checkOutside(path string) error {
	if s.inVault(path) {
		return Problem{Path: path, Reason: "resolves into the vault repository, which the agent and every pushed commit can write; configuration is never read from there"}
	}
	return nil
}

// outsideVault refuses an MCP server's absolute path that is in the vault
// or resolves into it, or that goes through a link that points nowhere
// (its target may be made later, in the vault). The error says why, for
// a sentence that starts with the path.
func (s *Store) outsideVault(path string) error {
	real, err := vault.RealPath(path)
	if err != nil {
		return fmt.Errorf("cannot be resolved (%v), so it might lead into the vault", errors.Unwrap(err))
	}
	if vault.Within(s.vault, real) {
		return errors.New("is in the vault or leads there through a link, and the agent can write there")
	}
	return nil
}

// inVault tells whether path, symbolic links resolved, is in the vault.
func (s *Store) inVault(path string) bool {
	real, err := vault.Resolve(path)
	if err != nil {
		return true
	}
	return vault.Within(s.vault, real)
}
