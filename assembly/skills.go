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

// offerSkills gives a session person's skills. The CLI loads no settings
// (so no user or project skills, the vault's included), but it loads a
// plugin given with --plugin-dir: the skills are written as one, under
// SkillsDir, in a folder named after their content, so a running session
// keeps its copy whatever the configuration does next. The Skill tool
// joins the set, and skills are let back in (the isolation flags turn them
// off for sessions without any). A skill that cannot be written is
// logged, and the session starts without skills.
func (l *Launcher) offerSkills(spec *supervisor.Spec, person string, skills []config.Skill) {
	dir, err := writeSkillsPlugin(l.cfg.SkillsDir, skills)
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

// writeSkillsPlugin writes skills as a plugin under root, once per
// content, and returns the plugin's folder.
func writeSkillsPlugin(root string, skills []config.Skill) (string, error) {
	if root == "" {
		return "", errors.New("no folder to write skills to")
	}
	h := sha256.New()
	for _, s := range skills {
		b, _ := json.Marshal([]string{s.Name, string(s.Content)})
		h.Write(b)
	}
	final := filepath.Join(root, hex.EncodeToString(h.Sum(nil))[:16])
	plugin := filepath.Join(final, SkillsPlugin)
	if _, err := os.Stat(plugin); err == nil {
		return plugin, nil
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("write skills: %w", err)
	}
	tmp, err := os.MkdirTemp(root, ".new-")
	if err != nil {
		return "", fmt.Errorf("write skills: %w", err)
	}
	defer os.RemoveAll(tmp)
	for _, s := range skills {
		d := filepath.Join(tmp, SkillsPlugin, "skills", s.Name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", fmt.Errorf("write skill %s: %w", s.Name, err)
		}
		if err := os.WriteFile(filepath.Join(d, config.SkillFile), s.Content, 0o644); err != nil {
			return "", fmt.Errorf("write skill %s: %w", s.Name, err)
		}
	}
	// Another session may have written the same skills meanwhile: its
	// copy is as good.
	if err := os.Rename(tmp, final); err != nil {
		if _, serr := os.Stat(plugin); serr != nil {
			return "", fmt.Errorf("write skills: %w", err)
		}
	}
	return plugin, nil
}
