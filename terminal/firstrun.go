package terminal

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/majorhq/major/internal/atomicfile"
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

// configFile is the CLI's configuration file for environment env:
// $CLAUDE_CONFIG_DIR/.claude.json, else $HOME/.claude.json.
func configFile(env []string) string {
	get := func(k string) string {
		v := ""
		for _, kv := range env {
			if key, val, ok := strings.Cut(kv, "="); ok && key == k {
				v = val
			}
		}
		return v
	}
	if dir := get("CLAUDE_CONFIG_DIR"); dir != "" {
		return filepath.Join(dir, ".claude.json")
	}
	if home := get("HOME"); home != "" {
		return filepath.Join(home, ".claude.json")
	}
	return ""
}

// firstRunAnswered records the first-run answers for a terminal in dir,
// changing the file only when one is missing.
func (m *Manager) firstRunAnswered(env []string, dir string) error {
	path := configFile(env)
	if path == "" {
		return errors.New("the CLI's configuration file is unknown: neither CLAUDE_CONFIG_DIR nor HOME is set")
	}
	m.configMu.Lock()
	defer m.configMu.Unlock()
	cfg := map[string]any{}
	raw, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return fmt.Errorf("read the CLI's configuration: %w", err)
	default:
		if err := json.Unmarshal(raw, &cfg); err != nil {
			return fmt.Errorf("the CLI's configuration %s is not JSON: %w", path, err)
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
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	if err := atomicfile.Write(path, out); err != nil {
		return fmt.Errorf("write the CLI's configuration: %w", err)
	}
	return nil
}
