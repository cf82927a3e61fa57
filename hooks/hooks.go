// Package hooks answers the Claude Code CLI's hook callbacks for the notes
// vault: it registers the callbacks (Matchers) and dispatches each one
// (Handle) to the vault package, which decides: the vault guard before
// every tool, the write leases that keep file tools and git syncs apart,
// and the WebFetch and WebSearch audit logs. It also ends a turn (EndTurn,
// CommitTurn) and names the CLI flags that keep the vault from
// configuring the CLI (IsolationArgs).
//
// It holds no vault rule of its own: path checks, person names, git and
// log writing belong to vault, and it must not write to the vault other
// than through it.
package hooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/supervisor"
	"github.com/majorhq/major/vault"
)

// The hook callback ids Matchers registers and Handle answers.
const (
	CallbackVaultGuard   = "vault_guard"
	CallbackWebFetchLog  = "webfetch_log"
	CallbackWebSearchLog = "websearch_log"
	// CallbackToolDone ends a file tool's lease after it ran or failed.
	CallbackToolDone = "tool_done"
	// CallbackSkillShell refuses the shell commands embedded in skills.
	CallbackSkillShell = "skill_shell"
)

// Config configures Hooks.
type Config struct {
	// VaultRoot is the vault repository; each person's vault is a folder
	// in it.
	VaultRoot string
	// Git commits and pushes the audit logs and the turns' changes. Nil:
	// logs are written but not committed, and CommitTurn does nothing.
	Git *vault.GitSync
	// Clock stamps log entries; default time.Now.
	Clock func() time.Time
	// LogTimeout bounds recording one web request (waiting for the git
	// queue, pull, append, commit, push), so a slow remote holds the tool
	// call back this long at most; default 20s.
	LogTimeout time.Duration
	Logger     zerolog.Logger
}

// Caller is the session a hook callback came from; *supervisor.CLI
// satisfies it.
type Caller interface {
	ID() string
	Person() string
	Notice(text string)
}

var _ Caller = (*supervisor.CLI)(nil)

// Hooks answers hook callbacks for every session of the server.
type Hooks struct {
	cfg   Config
	log   zerolog.Logger
	guard vault.Guard
	audit *vault.AuditLog

	// Per session: how many hook callbacks (tool calls) it made, and
	// how many it had made when a turn's end last found its person's
	// folder committed. Equal counts mean no tool ran since: the turn
	// cannot have changed a file, and its end need not ask git.
	mu      sync.Mutex
	calls   map[string]uint64
	checked map[string]uint64
}

// New returns Hooks for the vault at cfg.VaultRoot.
func New(cfg Config) *Hooks {
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.LogTimeout <= 0 {
		cfg.LogTimeout = 20 * time.Second
	}
	return &Hooks{
		cfg:   cfg,
		log:   cfg.Logger.With().Str("component", "hooks").Logger(),
		guard: vault.Guard{VaultRoot: cfg.VaultRoot},
		audit: vault.NewAuditLog(cfg.VaultRoot, cfg.Git),
		calls: map[string]uint64{}, checked: map[string]uint64{},
	}
}

// Matchers are the hooks to register in supervisor.Spec.Hooks: the vault
// guard before every tool (tools without path fields pass straight
// through), the audit logs before WebFetch and WebSearch, and the refusal
// of every shell command a skill embeds (PreSkillShellCommand).
func (h *Hooks) Matchers() map[string][]supervisor.HookMatcher {
	// The CLI's own hook timeout must outlast ours, or it would give up
	// on a log that is still being recorded.
	logTimeout := int((h.cfg.LogTimeout+10*time.Second)/time.Second) + 1
	// The guard may hold a write back while a git sync runs.
	guardTimeout := logTimeout
	if h.cfg.Git != nil {
		guardTimeout = int((h.cfg.Git.WriteHold()+10*time.Second)/time.Second) + 1
	}
	done := []supervisor.HookMatcher{{Matcher: "*", HookCallbackIDs: []string{CallbackToolDone}}}
	return map[string][]supervisor.HookMatcher{
		// A skill's "!`...`" lines would run in a shell as the skill
		// loads, past every file tool and the guard; the skills come
		// from the owner's configuration, but no shell is offered.
		"PreSkillShellCommand": {{Matcher: "*", HookCallbackIDs: []string{CallbackSkillShell}}},
		"PostToolUse":          done,
		"PostToolUseFailure":   done,
		"PreToolUse": {
			{Matcher: "*", HookCallbackIDs: []string{CallbackVaultGuard}, Timeout: guardTimeout},
			{Matcher: "WebFetch", HookCallbackIDs: []string{CallbackWebFetchLog}, Timeout: logTimeout},
			{Matcher: "WebSearch", HookCallbackIDs: []string{CallbackWebSearchLog}, Timeout: logTimeout},
		},
	}
}

// Handle answers one hook_callback from session c; it is meant for
// supervisor.Handlers.HookCallback. An unknown callback id is an error, so
// the CLI gets an error response rather than a silent allow.
func (h *Hooks) Handle(ctx context.Context, c Caller, req *supervisor.ControlRequest) (json.RawMessage, error) {
	if req == nil {
		return nil, fmt.Errorf("hook callback without a request")
	}
	var in supervisor.HookInput
	if len(req.HookInput) > 0 {
		if err := json.Unmarshal(req.HookInput, &in); err != nil && req.CallbackID != CallbackVaultGuard {
			return nil, fmt.Errorf("decode hook input: %w", err)
		}
	}
	log := h.log.With().Str("session", c.ID()).Str("person", c.Person()).Str("tool", in.ToolName).Logger()
	// Every tool call passes here (the guard matches every tool), before
	// it runs: from now on the session's turn end asks git again.
	h.mu.Lock()
	h.calls[c.ID()]++
	h.mu.Unlock()
	switch req.CallbackID {
	case CallbackVaultGuard:
		if reason := h.guard.Check(c.Person(), in.Cwd, in.ToolName, in.ToolInput); reason != "" {
			log.Warn().RawJSON("input", safeRaw(in.ToolInput)).Str("reason", reason).Msg("tool call denied by the vault guard")
			return deny(reason), nil
		}
		if h.cfg.Git != nil && vault.TouchesFiles(in.ToolName, in.ToolInput) {
			// The lease ends with the tool's PostToolUse (or its failure),
			// or with the turn, or expires (vault.GitConfig.WriteTTL).
			if err := h.cfg.Git.BeginWrite(ctx, c.ID(), toolUseID(req, in)); err != nil {
				log.Warn().Err(err).Msg("file tool held back for too long")
				if errors.Is(err, vault.ErrTooManyWrites) {
					return deny("Too many file tools of this chat are running at once, so this tool call was not made. Try it again in a moment."), nil
				}
				return deny("The notes are being synced with git right now, so this tool call was not made. Try it again in a moment."), nil
			}
		}
		return proceed(), nil
	case CallbackSkillShell:
		log.Warn().RawJSON("input", safeRaw(in.ToolInput)).Msg("a skill's shell command denied")
		return denyEvent("PreSkillShellCommand", skillShellDenied), nil
	case CallbackToolDone:
		if h.cfg.Git != nil {
			h.cfg.Git.EndWrite(c.ID(), toolUseID(req, in))
		}
		return proceed(), nil
	case CallbackWebFetchLog:
		var ti struct {
			URL string `json:"url"`
		}
		_ = json.Unmarshal(in.ToolInput, &ti)
		h.record(ctx, log, c, WebFetchLogPath, "Log WebFetch request", webFetchText(ti.URL))
		return proceed(), nil
	case CallbackWebSearchLog:
		var ti struct {
			Query string `json:"query"`
		}
		_ = json.Unmarshal(in.ToolInput, &ti)
		h.record(ctx, log, c, WebSearchLogPath, "Log WebSearch query", ti.Query)
		return proceed(), nil
	default:
		return nil, fmt.Errorf("unknown hook callback id %q", req.CallbackID)
	}
}

// record appends an audit entry and commits it, within LogTimeout. A
// failure never stops the tool call: it is logged and the session's
// clients are told the request went unrecorded.
func (h *Hooks) record(ctx context.Context, log zerolog.Logger, c Caller, rel, what, text string) {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.LogTimeout)
	defer cancel()
	err := h.audit.Append(ctx, vault.Entry{
		Log:     rel,
		Line:    LogEntry(h.cfg.Clock(), c.Person(), text),
		Message: fmt.Sprintf("%s (%s, session %s)", what, c.Person(), c.ID()),
	})
	if err != nil {
		log.Error().Err(err).Str("log", rel).Msg("audit log not recorded")
		c.Notice(fmt.Sprintf("%s: the audit log %s could not be updated and synced; the request went ahead.", what, rel))
	}
}

// EndTurn ends every write lease of the session whose turn is over, so a
// write whose end was never reported holds no sync back.
func (h *Hooks) EndTurn(sessionID string) {
	if h.cfg.Git != nil {
		h.cfg.Git.EndWrites(sessionID)
	}
}

// toolUseID is the tool call a hook callback is about.
func toolUseID(req *supervisor.ControlRequest, in supervisor.HookInput) string {
	if in.ToolUseID != "" {
		return in.ToolUseID
	}
	return req.ToolUseID
}

// Wrote records that something other than a tool wrote into the folder
// for session sessionID's turn (the files its message carried): the
// turn's end looks for changes even if no tool ran.
func (h *Hooks) Wrote(sessionID string) {
	h.mu.Lock()
	h.calls[sessionID]++
	h.mu.Unlock()
}

// CommitTurn commits what a turn changed in person's vault, and only there,
// naming the session; a turn that changed nothing commits nothing, and one
// in which no tool ran does not ask git. Callers
// report an error as a status: the turn itself has already succeeded.
func (h *Hooks) CommitTurn(ctx context.Context, person, sessionID string) error {
	if _, err := h.guard.Folder(person); err != nil {
		return fmt.Errorf("commit turn: %w", err)
	}
	if h.cfg.Git == nil {
		return nil
	}
	// Only the session's tools write into the folder, and each session
	// commits its own writes: after a turn without a tool call (most
	// chat turns) there is nothing to look for. The first turn end of
	// each session in this server's life always looks.
	h.mu.Lock()
	calls := h.calls[sessionID]
	seen, ok := h.checked[sessionID]
	h.mu.Unlock()
	if ok && seen == calls {
		return nil
	}
	if err := h.cfg.Git.CommitTurn(ctx, person, sessionID); err != nil {
		return fmt.Errorf("commit turn: %w", err)
	}
	// A tool call of the next turn that came meanwhile counted past
	// calls, so the next turn end looks again.
	h.mu.Lock()
	h.checked[sessionID] = calls
	h.mu.Unlock()
	return nil
}

// BeginRewind holds the vault's git sync off while the CLI restores
// files of session sessionID, as a file tool's write does: a pull must not
// stash and re-apply the work tree under the restore. It waits for a sync
// that runs (bounded); release ends the hold and must be called before
// CommitRewind.
func (h *Hooks) BeginRewind(ctx context.Context, sessionID string) (release func(), err error) {
	if h.cfg.Git == nil {
		return func() {}, nil
	}
	if err := h.cfg.Git.BeginWrite(ctx, sessionID, rewindWrite); err != nil {
		return nil, fmt.Errorf("begin rewind: %w", err)
	}
	return func() { h.cfg.Git.EndWrite(sessionID, rewindWrite) }, nil
}

// rewindWrite names a rewind's restore among a session's writes.
const rewindWrite = "rewind"

// CommitRewind commits the files a rewind of session sessionID restored
// in person's folder. Unlike a turn's end it always asks git: the CLI
// restores the files without a tool call.
func (h *Hooks) CommitRewind(ctx context.Context, person, sessionID string) error {
	if _, err := h.guard.Folder(person); err != nil {
		return fmt.Errorf("commit rewind: %w", err)
	}
	if h.cfg.Git == nil {
		return nil
	}
	if err := h.cfg.Git.CommitTurn(ctx, person, sessionID); err != nil {
		return fmt.Errorf("commit rewind: %w", err)
	}
	return nil
}

// IsolationArgs are the CLI flags (for supervisor.Spec.ExtraArgs) that keep
// anything inside the vault from configuring the CLI, since the vault is
// its working directory and the model can write there:
//
//   - --setting-sources "" loads no settings files: no project
//     .claude/settings.json (hooks, permissions, env, model), and with it no
//     CLAUDE.md instructions and no project skills, agents or commands.
//   - --strict-mcp-config uses only the MCP servers given by --mcp-config,
//     never a .mcp.json.
//   - --disable-slash-commands turns off skills and commands altogether,
//     the Skill tool included.
//
// The SDK hooks registered at initialize keep working under all three.
// --bare and --safe-mode are not used: --bare drops the SDK hooks (the
// vault guard with them) and both still apply a project settings file's
// env.
func IsolationArgs() []string {
	return []string{"--setting-sources", "", "--strict-mcp-config", "--disable-slash-commands"}
}

func proceed() json.RawMessage { return json.RawMessage(`{"continue":true}`) }

// Deny is a PreToolUse hook's answer that refuses the tool call, with the
// reason the model sees.
func Deny(reason string) json.RawMessage { return deny(reason) }

func deny(reason string) json.RawMessage { return denyEvent("PreToolUse", reason) }

// denyEvent is the answer of a hook of event that refuses what it asks
// about, with the reason the model sees.
func denyEvent(event, reason string) json.RawMessage {
	out, _ := json.Marshal(map[string]any{"hookSpecificOutput": map[string]string{
		"hookEventName":            event,
		"permissionDecision":       "deny",
		"permissionDecisionReason": reason,
	}})
	return out
}

// skillShellDenied is what the model reads for a skill's shell command.
const skillShellDenied = "Shell commands in skills do not run here: there is no shell. Follow the skill's other instructions with the tools you have."

// safeRaw returns raw if it is JSON, so a log line never breaks.
func safeRaw(raw json.RawMessage) []byte {
	if json.Valid(raw) {
		return raw
	}
	return []byte("null")
}
