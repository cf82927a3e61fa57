package supervisor

import (
	"slices"
	"strings"
	"testing"
)

func TestArgsJoinEveryValueToItsFlag(t *testing.T) {
	spec := Spec{
		SystemPrompt:    "-starts with a dash",
		Tools:           []string{"-Read", "Write"},
		AllowedTools:    []string{"-Read"},
		DisallowedTools: []string{"-Bash"},
		PermissionMode:  "plan",
		SDKMCPServers:   []string{"linkedin"},
		Model:           "-model",
		MCPConfigFiles:  []string{"-mcp.json"},
		PluginDirs:      []string{"-plugins"},
		Settings:        `{"disableBundledSkills":true}`,
	}
	args := spec.Args("-resume-id")
	if !slices.Contains(args, "--mcp-config=-mcp.json") {
		t.Errorf("no --mcp-config=-mcp.json in %q", args)
	}
	// Each flag that takes a value carries it after "=", in one argument.
	for flag, value := range map[string]string{
		"--input-format": "stream-json", "--output-format": "stream-json", "--permission-prompt-tool": "stdio",
		"--system-prompt": "-starts with a dash", "--tools": "-Read,Write", "--allowedTools": "-Read",
		"--disallowedTools": "-Bash", "--permission-mode": "plan", "--model": "-model", "--resume": "-resume-id",
		"--mcp-config": `{"mcpServers":{"linkedin":{"name":"linkedin","type":"sdk"}}}`,
		"--plugin-dir": "-plugins", "--settings": `{"disableBundledSkills":true}`,
	} {
		found := false
		for _, a := range args {
			if a == flag {
				t.Errorf("%s is a separate argument: %q", flag, args)
			}
			if a == flag+"="+value {
				found = true
			}
		}
		if !found {
			t.Errorf("no %s=%s in %q", flag, value, args)
		}
	}
	// Nothing but the flags themselves starts with a dash.
	for _, a := range args {
		if !strings.HasPrefix(a, "--") && a != "-p" {
			t.Errorf("argument %q stands alone", a)
		}
	}
}

func TestFingerprintCoversTheLaunch(t *testing.T) {
	base := func() Spec {
		return Spec{Binary: "/bin/true", Env: []string{"A=1"}, SystemPrompt: "p", Tools: []string{"Read"},
			Hooks: map[string][]HookMatcher{"PreToolUse": {{Matcher: "Read", HookCallbackIDs: []string{"h"}}}}}
	}
	fp := base().Fingerprint("/v/sebastian")
	if again := base().Fingerprint("/v/sebastian"); again != fp {
		t.Fatal("the same launch gave two fingerprints")
	}
	changes := map[string]func(*Spec, *string){
		"dir":     func(_ *Spec, dir *string) { *dir = "/v/petra" },
		"binary":  func(s *Spec, _ *string) { s.Binary = "/bin/false" },
		"env":     func(s *Spec, _ *string) { s.Env = []string{"A=2"} },
		"prompt":  func(s *Spec, _ *string) { s.SystemPrompt = "q" },
		"tools":   func(s *Spec, _ *string) { s.Tools = []string{"Read", "Write"} },
		"allowed": func(s *Spec, _ *string) { s.AllowedTools = []string{"Read"} },
		"hooks":   func(s *Spec, _ *string) { s.Hooks["PreToolUse"][0].Matcher = "Write" },
		"mcp":     func(s *Spec, _ *string) { s.SDKMCPServers = []string{"linkedin"} },
		"model":   func(s *Spec, _ *string) { s.Model = "m" },
		"args":    func(s *Spec, _ *string) { s.ExtraArgs = []string{"--strict-mcp-config"} },
	}
	for name, change := range changes {
		s, dir := base(), "/v/sebastian"
		change(&s, &dir)
		if s.Fingerprint(dir) == fp {
			t.Errorf("a changed %s kept the fingerprint", name)
		}
	}
}

// A permission mode that skips permissions, or any other that is not one
// a person may choose, never reaches the command line.
func TestArgsCarryOnlyChoosableModes(t *testing.T) {
	for _, mode := range []string{"bypassPermissions", "dontAsk", "auto", "-default", "plan "} {
		for _, a := range (Spec{PermissionMode: mode}).Args("") {
			if strings.HasPrefix(a, "--permission-mode") {
				t.Errorf("mode %q: %s", mode, a)
			}
		}
	}
	if !slices.Contains((Spec{PermissionMode: "default"}).Args(""), "--permission-mode=default") {
		t.Error("default is not passed")
	}
}
