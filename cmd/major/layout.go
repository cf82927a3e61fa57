package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/majorhq/major/clientevent"
	"github.com/majorhq/major/vault"
)

// defaultStateDir is where sessions and event logs live unless
// --state-dir says otherwise: the user's state directory
// ($XDG_STATE_HOME/major, else ~/.local/state/major), never the vault, so
// transcripts, tool results and fetched pages cannot be committed and
// pushed with the notes.
func defaultStateDir(getenv func(string) string) string {
	if d := getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "major")
	}
	if h := getenv("HOME"); h != "" {
		return filepath.Join(h, ".local", "state", "major")
	}
	return filepath.Join(os.TempDir(), "major-state")
}

// defaultConfigDir is where the session configuration is read from
// unless --config-dir says otherwise: the user's configuration directory
// ($XDG_CONFIG_HOME/major, else ~/.config/major), never the vault.
func defaultConfigDir(getenv func(string) string) string {
	if d := getenv("XDG_CONFIG_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "major")
	}
	if h := getenv("HOME"); h != "" {
		return filepath.Join(h, ".config", "major")
	}
	return filepath.Join(os.TempDir(), "major-config")
}

// vaultRepository is the top of the git repository the vault root is in
// (the vault root itself when git cannot tell): every file in it can come
// from a pushed commit.
func vaultRepository(ctx context.Context, vaultRoot string) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "git", "-C", vaultRoot, "rev-parse", "--show-toplevel").Output()
	if top := strings.TrimSpace(string(out)); err == nil && filepath.IsAbs(top) {
		return top
	}
	return vaultRoot
}

// checkConfigDir refuses a configuration directory that overlaps the
// state directory: the server writes there, and configuration is only
// ever written by the server's owner. (config.Open refuses one that
// overlaps the vault.)
func checkConfigDir(configDir, stateDir string) error {
	conf, err := vault.Resolve(configDir)
	if err != nil {
		return err
	}
	state, err := vault.Resolve(stateDir)
	if err != nil {
		return err
	}
	for _, pair := range [][2]string{{conf, state}, {state, conf}} {
		if rel, err := filepath.Rel(pair[0], pair[1]); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return fmt.Errorf("--config-dir %s and --state-dir %s overlap; the server writes the state directory and only reads the configuration", configDir, stateDir)
		}
	}
	return nil
}

// checkPersons refuses a configuration naming a person who cannot have a
// folder in the vault: a name that is not plain, or a folder the server
// already uses for something else.
func checkPersons(persons []string) error {
	for _, p := range persons {
		if err := vault.CheckPerson(p); err != nil {
			return err
		}
	}
	return nil
}

// checkStateDir makes sure the state directory is not inside any person's
// folder (a file tool of that person could read or plant session logs
// there) nor in a folder a person could get later. A state directory
// inside the vault root must sit under a top-level folder that no person
// can be named after (one starting with a dot, say), and it is excluded
// from git so `git add -A` never records it. It returns the folder's path
// relative to the vault root, or "" when it is outside.
func checkStateDir(vaultRoot, stateDir string) (string, error) {
	root, err := vault.Resolve(vaultRoot)
	if err != nil {
		return "", err
	}
	state, err := vault.Resolve(stateDir)
	if err != nil {
		return "", err
	}
	rel, err := filepath.Rel(root, state)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", nil
	}
	if rel == "." {
		return "", fmt.Errorf("--state-dir %s is the vault root itself; keep it outside the vault (the default, $XDG_STATE_HOME/major or ~/.local/state/major, is)", stateDir)
	}
	top := strings.Split(rel, string(filepath.Separator))[0]
	if vault.ValidPerson(top) || vault.Reserved(top) {
		return "", fmt.Errorf("--state-dir %s is inside the vault folder %s/, which a person's tools can reach; keep it outside the vault (the default, $XDG_STATE_HOME/major or ~/.local/state/major, is)", stateDir, top)
	}
	return rel, nil
}

// excludeFromGit adds rel (relative to the vault root) to the repository's
// own exclude file (.git/info/exclude), which no commit carries and no
// file tool can reach.
func excludeFromGit(ctx context.Context, vaultRoot, rel string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "git", "-C", vaultRoot, "rev-parse", "--path-format=absolute", "--git-path", "info/exclude").Output()
	if err != nil {
		return fmt.Errorf("find the vault's git exclude file: %w", err)
	}
	prefix, err := exec.CommandContext(ctx, "git", "-C", vaultRoot, "rev-parse", "--show-prefix").Output()
	if err != nil {
		return fmt.Errorf("find the vault's place in its repository: %w", err)
	}
	file := strings.TrimSpace(string(out))
	pattern := "/" + filepath.ToSlash(filepath.Join(strings.TrimSpace(string(prefix)), rel)) + "/"
	have, err := os.ReadFile(file)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read %s: %w", file, err)
	}
	for _, line := range strings.Split(string(have), "\n") {
		if strings.TrimSpace(line) == pattern {
			return nil
		}
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	text := "# Major's session state: never committed\n" + pattern + "\n"
	if len(have) > 0 && have[len(have)-1] != '\n' {
		text = "\n" + text
	}
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// serverPaths are the folders of this server that its clients never see
// in an event, a history or an error: the vault outside each person's
// folder (and the repository it is in), the state and configuration
// directories, the CLI's home and install folder, this binary's folder,
// the working directory and the temp folders, each as the server and as
// the CLI's environment name them.
func serverPaths(vaultRoot, repository, stateDir, configDir, claude string, environ []string, more ...string) clientevent.ServerPaths {
	getenv := lookup(environ)
	hidden := []string{repository, stateDir, configDir, getenv("CLAUDE_CONFIG_DIR"), getenv("TMPDIR"), getenv("XDG_RUNTIME_DIR"),
		os.TempDir(), "/tmp", filepath.Dir(claude)}
	hidden = append(hidden, more...)
	if real, err := filepath.EvalSymlinks(claude); err == nil {
		// The CLI's own files are where the link points (node_modules).
		hidden = append(hidden, filepath.Dir(real))
	}
	if exe, err := os.Executable(); err == nil {
		hidden = append(hidden, filepath.Dir(exe))
	}
	if wd, err := os.Getwd(); err == nil {
		hidden = append(hidden, wd)
	}
	for i, d := range hidden {
		if abs, err := filepath.Abs(d); d != "" && err == nil {
			hidden[i] = abs
		}
	}
	return clientevent.ServerPaths{VaultRoot: vaultRoot, Hidden: hidden, Home: getenv("HOME")}
}
