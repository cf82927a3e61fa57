package supervisor

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Spec is how every CLI process of a session is launched.
type Spec struct {
	// Binary is the claude executable.
	Binary string
	// Env is the child's environment (see CleanEnv).
	Env []string
	// SystemPrompt replaces the CLI's default system prompt when set.
	SystemPrompt string
	// Tools is the tool set the model sees (--tools).
	Tools []string
	// AllowedTools run without asking (--allowedTools).
	AllowedTools []string
	// DisallowedTools are never available (--disallowedTools).
	DisallowedTools []string
	// PermissionMode is passed as --permission-mode when set.
	PermissionMode string
	// SDKMCPServers are MCP servers hosted by this process, answered through
	// mcp_message control requests.
	SDKMCPServers []string
	// MCPConfigFiles are files of more MCP servers, in .mcp.json format,
	// started by the CLI; each is one more --mcp-config. A file, not the
	// command line, so that their env and headers (tokens) are not in the
	// process list.
	MCPConfigFiles []string
	// PluginDirs are plugin folders loaded for the session only
	// (--plugin-dir): the way skills reach a CLI that loads no settings.
	PluginDirs []string
	// Settings is a settings JSON passed as --settings when set.
	Settings string
	// Hooks are registered in the initialize request.
	Hooks map[string][]HookMatcher
	// Model is passed as --model when set.
	Model string
	// MaxThinkingTokens is passed as --max-thinking-tokens when set (models
	// with a thinking budget); Effort as --effort (low ... max; models
	// that think adaptively).
	MaxThinkingTokens int
	Effort            string
	// MaxTurns bounds the agent turns of one message (--max-turns).
	MaxTurns int
	// MaxBudgetUSD bounds what the process may spend (--max-budget-usd);
	// the CLI counts from the process's start.
	MaxBudgetUSD float64
	// ForkSession makes a resume continue as a new conversation
	// (--fork-session), leaving the resumed one unchanged.
	ForkSession bool
	// ResumeAt makes a resume keep the conversation only up to and
	// including this entry (--resume-session-at).
	ResumeAt string
	// ExtraArgs are appended as they are.
	ExtraArgs []string
	// Sandbox, when set, is the command line that Binary and its
	// arguments run in (bwrap and its options, ending in "--"; see
	// package sandbox).
	Sandbox []string
	// Credential, when set, gives each process what it needs to reach the
	// model, valid while the process lives: it is called as the process
	// starts, for the session it starts for ("" for a process started
	// ahead, which a session may take later). It is not part of
	// Fingerprint: every process has its own.
	Credential func(session string) Credential
	// Grace bounds each step of stopping a process; default 3s.
	Grace time.Duration
	// InitTimeout bounds start-up to the initialize response; default 60s.
	InitTimeout time.Duration
}

// Credential is one process's access to the model: more environment (a
// token of its own), and what to do when a session takes the process
// (Bind) and when it is gone (Revoke). Bind and Revoke may be nil.
type Credential struct {
	Env    []string
	Bind   func(session string)
	Revoke func()
}

// Command is the whole command line of one process: the sandbox, if any,
// then Binary and Args(resume).
func (s Spec) Command(resume string) []string {
	argv := append(slices.Clone(s.Sandbox), s.Binary)
	return append(argv, s.Args(resume)...)
}

// credential is a process's credential for session, or none.
func (s Spec) credential(session string) Credential {
	if s.Credential == nil {
		return Credential{}
	}
	return s.Credential(session)
}

func (c Credential) revoke() {
	if c.Revoke != nil {
		c.Revoke()
	}
}

// env is the environment of a process with credential c.
func (s Spec) env(c Credential) []string {
	if len(c.Env) == 0 {
		return s.Env
	}
	return append(slices.Clone(s.Env), c.Env...)
}

// PermissionModes are the CLI permission modes a session may run in: a
// person may choose each, and the CLI may move between them (an approved
// plan ends plan mode). Modes that skip permissions (bypassPermissions,
// dontAsk, auto) are never among them.
var PermissionModes = []string{"default", "acceptEdits", "plan"}

// ChoosableMode reports whether mode is one of PermissionModes.
func ChoosableMode(mode string) bool { return slices.Contains(PermissionModes, mode) }

// HookMatcher registers hook callback ids for tools matching Matcher (a
// tool-name pattern such as "Read|Write").
type HookMatcher struct {
	Matcher         string   `json:"matcher"`
	HookCallbackIDs []string `json:"hookCallbackIds"`
	Timeout         int      `json:"timeout,omitempty"`
}

// Args returns the command line for one process; resume is the CLI session
// id to continue, or "". Every value is joined to its flag (--flag=value),
// so a value that starts with a dash can never be read as a flag of its
// own (--resume, for one, takes an optional value).
func (s Spec) Args(resume string) []string {
	return append([]string{
		"-p",
		"--input-format=stream-json",
		"--output-format=stream-json",
		"--verbose",
		"--include-partial-messages",
		"--permission-prompt-tool=stdio",
	}, s.SessionArgs(resume)...)
}

// SessionArgs is Args without the stream-json framing: what the session
// is (prompt, tools, permissions, MCP servers, plugins, settings, model,
// the conversation), for the interactive CLI as much as for -p.
func (s Spec) SessionArgs(resume string) []string {
	var args []string
	if s.SystemPrompt != "" {
		args = append(args, "--system-prompt="+s.SystemPrompt)
	}
	args = append(args, "--tools="+strings.Join(s.Tools, ","))
	if len(s.AllowedTools) > 0 {
		args = append(args, "--allowedTools="+strings.Join(s.AllowedTools, ","))
	}
	if len(s.DisallowedTools) > 0 {
		args = append(args, "--disallowedTools="+strings.Join(s.DisallowedTools, ","))
	}
	if s.PermissionMode != "" {
		// A mode that skips permissions never reaches the command line,
		// whatever set it: the CLI then starts in its default mode.
		if ChoosableMode(s.PermissionMode) {
			args = append(args, "--permission-mode="+s.PermissionMode)
		}
	}
	if len(s.SDKMCPServers) > 0 {
		servers := map[string]any{}
		for _, name := range s.SDKMCPServers {
			servers[name] = map[string]string{"type": "sdk", "name": name}
		}
		cfg, _ := json.Marshal(map[string]any{"mcpServers": servers})
		args = append(args, "--mcp-config="+string(cfg))
	}
	for _, f := range s.MCPConfigFiles {
		args = append(args, "--mcp-config="+f)
	}
	for _, d := range s.PluginDirs {
		args = append(args, "--plugin-dir="+d)
	}
	if s.Settings != "" {
		args = append(args, "--settings="+s.Settings)
	}
	if s.Model != "" {
		args = append(args, "--model="+s.Model)
	}
	if s.MaxThinkingTokens > 0 {
		args = append(args, "--max-thinking-tokens="+strconv.Itoa(s.MaxThinkingTokens))
	}
	if s.Effort != "" {
		args = append(args, "--effort="+s.Effort)
	}
	if s.MaxTurns > 0 {
		args = append(args, "--max-turns="+strconv.Itoa(s.MaxTurns))
	}
	if s.MaxBudgetUSD > 0 {
		args = append(args, "--max-budget-usd="+strconv.FormatFloat(s.MaxBudgetUSD, 'f', -1, 64))
	}
	if resume != "" {
		args = append(args, "--resume="+resume)
		if s.ForkSession {
			args = append(args, "--fork-session")
		}
		if s.ResumeAt != "" {
			args = append(args, "--resume-session-at="+s.ResumeAt)
		}
	}
	return append(args, s.ExtraArgs...)
}

func (s Spec) initializeBody() map[string]any {
	hooks := s.Hooks
	if hooks == nil {
		hooks = map[string][]HookMatcher{}
	}
	servers := s.SDKMCPServers
	if servers == nil {
		servers = []string{}
	}
	return map[string]any{"hooks": hooks, "sdkMcpServers": servers}
}

func (s Spec) grace() time.Duration {
	if s.Grace > 0 {
		return s.Grace
	}
	return 3 * time.Second
}

func (s Spec) initTimeout() time.Duration {
	if s.InitTimeout > 0 {
		return s.InitTimeout
	}
	return 60 * time.Second
}
