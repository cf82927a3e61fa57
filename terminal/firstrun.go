package terminal

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

// The interactive CLI shows first-run screens that the stream-json
// sessions never see: the onboarding (theme, a connectivity check of the
// Anthropic API) and whether to trust the working folder. The server has
// already made those choices for its sessions, so before a terminal starts
// it records the answers in the CLI's own configuration file, as the CLI
// does when a person answers them: hasCompletedOnboarding and
// projects[<vault>].hasTrustDialogAccepted. (It never asks whether to use
// an API key: the CLI's gateway token is a bearer token, which it uses
// without asking.) Trusting the vault folder loads nothing from it: the
// terminal runs with --setting-sources "" like every session.

// configHome is the folder the CLI's configuration file is in, and its
// name there: under Launch.Home, .claude/.claude.json; else, from the
// environment, $CLAUDE_CONFIG_DIR/.claude.json or $HOME/.claude.json.
func configHome(l Launch) (dir, name string) {
	if l.Home != "" {
		return l.Home, filepath.Join(".claude", ".claude.json")
	}
	get := func(k string) string {
		v := ""
		for _, kv := range l.Env {
			if key, val, ok := strings.Cut(kv, "="); ok && key == k {
				v = val
			}
		}
		return v
	}
	if d := get("CLAUDE_CONFIG_DIR"); d != "" {
		return d, ".claude.json"
	}
	if home := get("HOME"); home != "" {
		return home, ".claude.json"
	}
	return "", ""
}

// firstRunAnswered records the first-run answers for a terminal in dir,
// changing the file only when one is missing. The home is the person's
// own and their sandbox writes in it, so nothing under it is trusted: the
// file is read and written through an os.Root, which follows no link out
// of the home (a link planted there to the server's files, or to another
// person's folder, is an error, never followed).
func (m *Manager) firstRunAnswered(l Launch, dir string) error {
	home, name := configHome(l)
	if home == "" {
		return errors.New("the CLI's configuration file is unknown: neither CLAUDE_CONFIG_DIR nor HOME is set")
	}
	lock, _ := m.configLocks.LoadOrStore(home, &sync.Mutex{})
	mu := lock.(*sync.Mutex)
	mu.Lock()
	defer mu.Unlock()
	if err := os.MkdirAll(home, 0o700); err != nil {
		return err
	}
	root, err := os.OpenRoot(home)
	if err != nil {
		return fmt.Errorf("open the CLI's home: %w", err)
	}
	defer root.Close()
	cfg := map[string]any{}
	raw, err := readIn(root, name)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return fmt.Errorf("read the CLI's configuration: %w", err)
	default:
		if err := json.Unmarshal(raw, &cfg); err != nil {
			return fmt.Errorf("the CLI's configuration %s is not JSON: %w", name, err)
		}
	}
	changed := false
	if cfg["hasCompletedOnboarding"] != true {
		cfg["hasCompletedOnboarding"] = true
		changed = true
	}
	projects, _ := cfg["projects"].(map[string]any)
	if projects == nil {
		projects = map[string]any{}
		cfg["projects"] = projects
	}
	project, _ := projects[dir].(map[string]any)
	if project == nil {
		project = map[string]any{}
		projects[dir] = project
	}
	if project["hasTrustDialogAccepted"] != true {
		project["hasTrustDialogAccepted"] = true
		changed = true
	}
	if !changed {
		return nil
	}
	out, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	if err := writeIn(root, name, out); err != nil {
		return fmt.Errorf("write the CLI's configuration: %w", err)
	}
	return nil
}

// readIn reads name under root, only if it is a regular file. It is
// opened without waiting (a FIFO planted there would hold the open until
// someone wrote to it), and refused unless it is a regular file.
func readIn(root *os.Root, name string) ([]byte, error) {
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", name)
	}
	return io.ReadAll(io.LimitReader(f, 16<<20))
}

// writeIn replaces name under root with data: written to a new file
// beside it, synced, then renamed over it, all inside root.
func writeIn(root *os.Root, name string, data []byte) error {
	if err := root.MkdirAll(filepath.Dir(name), 0o700); err != nil {
		return err
	}
	tmp := name + ".major-new"
	_ = root.Remove(tmp)
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		_ = root.Remove(tmp)
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		_ = root.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		_ = root.Remove(tmp)
		return err
	}
	return root.Rename(tmp, name)
}
