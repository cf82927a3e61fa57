package assembly

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/majorhq/major/config"
	"github.com/majorhq/major/supervisor"
)

// SkillsPlugin is the name of the plugin a session's skills come in; the
// model sees each skill as SkillsPlugin:<name>.
const SkillsPlugin = "major"

// skillSettings hide from the model the skills that ship with the CLI,
// and the built-in plugin that brings one more, so that the configured
// skills are the only ones it is offered.
const skillSettings = `{"disableBundledSkills":true,"enabledPlugins":{"cc-plugin-plugin-authoring@builtin":false}}`

// The configured skills and MCP servers are written under FilesDir, each
// set in a place named after its content: written once, never changed, so
// a running session keeps its copy whatever the configuration does next.

// offerMCPServers gives a session the configured MCP servers, in a file
// only the server can read (their env and headers may hold tokens), each
// stdio server started in MCPWorkDir. A file that cannot be written is
// logged, and the session starts without them.
func (l *Launcher) offerMCPServers(spec *supervisor.Spec, person string, servers map[string]json.RawMessage) {
	servers, err := inWorkDir(servers)
	var data []byte
	if err == nil {
		data, err = json.Marshal(map[string]any{"mcpServers": servers})
	}
	if err == nil {
		var file string
		file, err = writeOnce(l.cfg.FilesDir, "mcp", "mcp.json", data, func(tmp string) error {
			return os.WriteFile(filepath.Join(tmp, "mcp.json"), data, 0o600)
		})
		if err == nil {
			spec.MCPConfigFiles = []string{file}
			return
		}
	}
	l.log.Error().Err(err).Str("person", person).Msg("the configured MCP servers cannot be offered")
}

// MCPWorkDir is the working directory of the configured stdio MCP
// servers. The CLI would start them in its own, the person's folder, which
// the agent writes, and its MCP configuration has no working directory of
// its own (its stdio entries take command, args and env); outside every
// vault, a relative name in a server's command line never reaches a file
// the agent wrote.
const MCPWorkDir = "/"

// envBinary starts a stdio MCP server in MCPWorkDir (GNU env's -C).
const envBinary = "/usr/bin/env"

// workDirCommand is the command line that runs command with args in
// MCPWorkDir: env changes the folder and sets PWD to it, which some
// programs read instead of asking, and unsets OLDPWD, which may name any
// folder the server's own environment came from. The configuration never
// has a command that env would read as an option (a leading -) or a
// variable (NAME=VALUE).
func workDirCommand(command string, args []string) (string, []string) {
	return envBinary, append([]string{"-u", "OLDPWD", "-C", MCPWorkDir, "PWD=" + MCPWorkDir, command}, args...)
}

// inWorkDir is servers with each stdio server's command line made
// workDirCommand's; other entries stay as they are.
func inWorkDir(servers map[string]json.RawMessage) (map[string]json.RawMessage, error) {
	out := make(map[string]json.RawMessage, len(servers))
	for name, raw := range servers {
		var entry map[string]json.RawMessage
		if err := json.Unmarshal(raw, &entry); err != nil {
			return nil, fmt.Errorf("mcp server %s: %w", name, err)
		}
		var kind, command string
		var args []string
		for key, v := range map[string]any{"type": &kind, "command": &command, "args": &args} {
			if entry[key] != nil {
				if err := json.Unmarshal(entry[key], v); err != nil {
					return nil, fmt.Errorf("mcp server %s: %s: %w", name, key, err)
				}
			}
		}
		if kind != "" && kind != "stdio" {
			out[name] = raw
			continue
		}
		command, args = workDirCommand(command, args)
		entry["command"], _ = json.Marshal(command)
		entry["args"], _ = json.Marshal(args)
		b, err := json.Marshal(entry)
		if err != nil {
			return nil, fmt.Errorf("mcp server %s: %w", name, err)
		}
		out[name] = b
	}
	return out, nil
}

// offerSkills gives a session person's skills. The CLI loads no settings
// (so no user or project skills, the vault's included), but it loads a
// plugin given with --plugin-dir: the skills are written as one. The Skill
// tool joins the set, and skills are let back in (the isolation flags
// turn them off for sessions without any). Skills that cannot be written
// are logged, and the session starts without them.
func (l *Launcher) offerSkills(spec *supervisor.Spec, person string, skills []config.Skill) {
	var key []byte
	for _, s := range skills {
		b, _ := json.Marshal([]string{s.Name, string(s.Content)})
		key = append(key, b...)
	}
	dir, err := writeOnce(l.cfg.FilesDir, "skills", SkillsPlugin, key, func(tmp string) error {
		for _, s := range skills {
			d := filepath.Join(tmp, SkillsPlugin, "skills", s.Name)
			if err := os.MkdirAll(d, 0o700); err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(d, config.SkillFile), s.Content, 0o600); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		l.log.Error().Err(err).Str("person", person).Msg("the configured skills cannot be offered")
		return
	}
	spec.Tools = append(spec.Tools, "Skill")
	spec.AllowedTools = append(spec.AllowedTools, "Skill")
	spec.PluginDirs = []string{dir}
	spec.Settings = skillSettings
	spec.ExtraArgs = slices.DeleteFunc(slices.Clone(spec.ExtraArgs), func(a string) bool { return a == "--disable-slash-commands" })
}

// writeOnce returns root/kind/<hash of key>/name, which write makes in the
// folder it is given, unless it was made before.
func writeOnce(root, kind, name string, key []byte, write func(dir string) error) (string, error) {
	if root == "" {
		return "", errors.New("no folder to write to")
	}
	sum := sha256.Sum256(key)
	final := filepath.Join(root, kind, hex.EncodeToString(sum[:8]))
	result := filepath.Join(final, name)
	if _, err := os.Stat(result); err == nil {
		return result, nil
	}
	if err := os.MkdirAll(filepath.Dir(final), 0o700); err != nil {
		return "", fmt.Errorf("write %s: %w", kind, err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(final), ".new-")
	if err != nil {
		return "", fmt.Errorf("write %s: %w", kind, err)
	}
	defer os.RemoveAll(tmp)
	if err := write(tmp); err != nil {
		return "", fmt.Errorf("write %s: %w", kind, err)
	}
	// Another session may have written the same meanwhile: its copy is as
	// good.
	if err := os.Rename(tmp, final); err != nil {
		if _, serr := os.Stat(result); serr != nil {
			return "", fmt.Errorf("write %s: %w", kind, err)
		}
	}
	return result, nil
}
