package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/majorhq/major/clientevent"
	"github.com/majorhq/major/supervisor"
)

// The controls a person has over a session from any client: the model,
// the permission mode and the thinking budget of the next turns, a fork
// of the conversation, and a rewind of the files and the conversation to
// before one of their messages.

// ErrBadSetting refuses a setting the session cannot take; its text says
// why.
var ErrBadSetting = errors.New("bad setting")

// ErrRefused is a setting or rewind the CLI itself refused.
var ErrRefused = errors.New("the assistant refused")

// PermissionModes are the CLI permission modes a person may choose. None
// of them skips a permission: bypassPermissions and dontAsk are never
// offered, and the vault guard denies in its hook before any mode counts.
var PermissionModes = supervisor.PermissionModes

// modelName is what a model name may look like (an alias such as "sonnet"
// or an id such as "claude-sonnet-4-5", with a [1m] context suffix).
var modelName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@/\[\]-]{0,99}$`)

// maxThinking bounds the thinking budget a person may set.
const maxThinking = 128000

func badSetting(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadSetting, fmt.Sprintf(format, args...))
}

// Spent is what the session's turns have cost so far, in USD.
func (c *Session) Spent() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.spentLocked()
}

// spentLocked is Spent; c.mu is held.
func (c *Session) spentLocked() float64 {
	if c.meteredMode {
		return c.metered
	}
	return c.tr.Spent()
}

// SetModel switches the model of the session's next turns.
func (c *Session) SetModel(ctx context.Context, model string) error {
	if !modelName.MatchString(model) {
		return badSetting("model must be a model name such as sonnet or claude-sonnet-4-5")
	}
	return c.configure(ctx, func(set *supervisor.Settings) { set.Model = model })
}

// SetPermissionMode sets the CLI's permission mode for the next turns:
// one of PermissionModes.
func (c *Session) SetPermissionMode(ctx context.Context, mode string) error {
	ok := false
	for _, m := range PermissionModes {
		ok = ok || m == mode
	}
	if !ok {
		return badSetting("mode must be one of %s", strings.Join(PermissionModes, ", "))
	}
	return c.configure(ctx, func(set *supervisor.Settings) { set.PermissionMode = mode })
}

// Efforts are the effort levels of adaptive thinking the CLI takes.
var Efforts = []string{"low", "medium", "high", "xhigh", "max"}

// SetThinking sets how the next turns think: a thinking budget in tokens
// (0: the CLI's default), for models with a budget, and/or an effort
// level (one of Efforts), for models that think adaptively. nil leaves
// either as it is.
func (c *Session) SetThinking(ctx context.Context, tokens *int, effort *string) error {
	if tokens != nil && (*tokens < 0 || *tokens > maxThinking) {
		return badSetting("max_thinking_tokens must be between 0 (the default) and %d", maxThinking)
	}
	if effort != nil && !slices.Contains(Efforts, *effort) {
		return badSetting("effort must be one of %s", strings.Join(Efforts, ", "))
	}
	return c.configure(ctx, func(set *supervisor.Settings) {
		if tokens != nil {
			set.MaxThinkingTokens = *tokens
		}
		if effort != nil {
			set.Effort = *effort
		}
	})
}

// configure changes the session's settings, tells the clients and keeps
// them for the next start.
func (c *Session) configure(ctx context.Context, change func(*supervisor.Settings)) error {
	c.setMu.Lock()
	defer c.setMu.Unlock()
	set := c.cli.Settings()
	change(&set)
	if err := c.cli.Configure(ctx, set); err != nil {
		var ce *supervisor.ControlError
		if errors.As(err, &ce) {
			c.log.Warn().Err(err).Msg("the CLI refused a setting")
			return fmt.Errorf("%w that setting", ErrRefused)
		}
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.publishSettingsLocked()
	c.persistLocked()
	return nil
}

// publishSettingsLocked tells the clients the session's settings. c.mu is held.
func (c *Session) publishSettingsLocked() {
	set := c.cli.Settings()
	model := set.Model
	if model == "" {
		model = c.model
	}
	c.stream.publishJSON(clientevent.Settings{Type: "settings", Model: model, PermissionMode: set.PermissionMode,
		MaxThinkingTokens: set.MaxThinkingTokens, Effort: set.Effort}, false, false)
}

// noteReportedLocked keeps the model and permission mode a system message of
// the CLI reports, and tells the clients of a change. c.mu is held.
func (c *Session) noteReportedLocked(m *supervisor.Message) {
	changed := false
	if m.Subtype == "init" && m.Model != "" && m.Model != c.model {
		c.model, changed = m.Model, c.model != ""
	}
	// Only a mode a person may choose: a report of any other (a line
	// something in the sandbox wrote onto the CLI's output, say) is
	// not the session's.
	if m.PermissionMode != "" && m.PermissionMode != c.mode && supervisor.ChoosableMode(m.PermissionMode) {
		changed = changed || c.mode != ""
		c.mode = m.PermissionMode
	}
	if changed {
		c.publishSettingsLocked()
	}
}

// Fork makes a new session of the person's that continues the
// conversation of the session with id; that session is unchanged. The
// new one shows the same history. The fork holds the original until the
// new session is made: messages sent to it meanwhile wait. supervisor.ErrBusy
// while a turn runs.
func (r *Registry) Fork(id, person string) (*Session, error) {
	orig, err := r.Get(id, person)
	if err != nil {
		return nil, err
	}
	release, err := orig.occupy("fork")
	if err != nil {
		return nil, err
	}
	defer release()
	orig.mu.Lock()
	set := orig.cli.Settings()
	m := meta{Person: person, CLISessionID: orig.cli.CLISessionID(), Title: orig.title,
		Model: set.Model, PermissionMode: set.PermissionMode, MaxThinkingTokens: set.MaxThinkingTokens, Effort: set.Effort,
		ResumeAt: orig.resumeAt, ForkedFrom: orig.ID, LastEntry: orig.tr.LastEntry()}
	m.Fork = m.CLISessionID != ""
	orig.mu.Unlock()
	// The client-facing events, for the history (the CLI's own stay with
	// the original), as they are with no turn open: the fork holds the
	// session, so none is added meanwhile. Read without the session's
	// lock, since an evicted session's events come back from disk under
	// the stream's upkeep lock, which comes first.
	events := compactEvents(orig.stream.Events(0), 0)

	if err := r.reserve(person); err != nil {
		return nil, err
	}
	defer r.unreserve(person)
	now := r.cfg.Now()
	m.ID, m.Created, m.LastActivity = uuid.NewString(), now, now
	c, err := r.open(m, events)
	if err != nil {
		r.log.Error().Err(err).Msg("session state not persisted")
	}
	if c.elog != nil {
		c.elog.Rewrite(records(events))
	}
	r.log.Info().Str("session", c.ID).Str("forked_from", id).Str("person", person).Msg("session forked")
	return c, nil
}

// RewindRequest is a rewind of a session to before one of the person's
// messages.
type RewindRequest struct {
	// MessageID is the message's id in the rich history (turn-N-user).
	MessageID string
	// DryRun only reports the files that would change.
	DryRun bool
	// Files restores the files the agent changed since the message;
	// Conversation makes the next message continue from before it.
	Files        bool
	Conversation bool
}

// RewindResult is what a rewind did (or, dry, would do).
type RewindResult struct {
	MessageID string `json:"message_id"`
	DryRun    bool   `json:"dry_run"`
	// Files are the changed files, relative to the person's folder.
	Files        []string `json:"files"`
	Insertions   int      `json:"insertions"`
	Deletions    int      `json:"deletions"`
	Conversation bool     `json:"conversation"`
	// Status says what happened to the restored notes in git, when not
	// all went well.
	Status string `json:"status,omitempty"`
}

// ErrNoCheckpoint refuses a rewind to a message the CLI has no file
// checkpoint for.
var ErrNoCheckpoint = errors.New("there is no file checkpoint for that message")

// Rewind restores the files the agent changed since the message and/or
// rewinds the conversation to before it. Every file the CLI would change
// is vetted first (RegistryConfig.VetRewind): one outside the person's
// folder refuses the whole rewind. The restore is committed
// (RegistryConfig.Rewound). The rewind holds the session from start to
// end: messages sent meanwhile wait and run after it. supervisor.ErrBusy
// while a turn runs or messages wait.
func (r *Registry) Rewind(ctx context.Context, c *Session, req RewindRequest) (RewindResult, error) {
	res := RewindResult{MessageID: req.MessageID, DryRun: req.DryRun, Files: []string{}, Conversation: req.Conversation}
	var commit string
	turn, ok := userTurn(req.MessageID)
	if !ok {
		return res, badSetting("message_id must be the id of one of your messages (turn-N-user)")
	}
	start, found := c.turnStart(turn)
	if !found {
		return res, fmt.Errorf("%w: no such message", ErrNotFound)
	}
	if start.CLIMessageID == "" {
		return res, ErrNoCheckpoint
	}
	// From the dry run to the rewound event no turn starts: messages
	// that arrive meanwhile wait behind the rewind.
	release, err := c.occupy("rewind")
	if err != nil {
		return res, err
	}
	defer release()
	if req.Files {
		if r.cfg.VetRewind == nil {
			return res, ErrNoCheckpoint
		}
		dry, err := c.cli.RewindFiles(ctx, start.CLIMessageID, true)
		if err != nil {
			return res, err
		}
		if !dry.CanRewind {
			c.log.Info().Str("cli_error", dry.Error).Msg("rewind refused by the CLI")
			return res, ErrNoCheckpoint
		}
		files, err := r.cfg.VetRewind(c.Person, dry.FilesChanged)
		if err != nil {
			return res, err
		}
		res.Files, res.Insertions, res.Deletions = files, dry.Insertions, dry.Deletions
		if !req.DryRun && len(files) > 0 {
			unlock := func() {}
			if r.cfg.Rewinding != nil {
				if unlock, err = r.cfg.Rewinding(ctx, c.Person, c.ID); err != nil {
					return res, err
				}
			}
			done, err := c.cli.RewindFiles(ctx, start.CLIMessageID, false)
			unlock()
			if err != nil {
				return res, err
			}
			if !done.CanRewind {
				c.log.Warn().Str("cli_error", done.Error).Msg("rewind failed in the CLI")
				return res, fmt.Errorf("%w the rewind", ErrRefused)
			}
			if r.cfg.Rewound != nil {
				res.Status = r.cfg.Rewound(ctx, c.Person, c.ID, req.MessageID)
			}
			// The restore's commit is the rewind's, not the next turn's.
			commit = r.newCommit(ctx, c)
		}
	}
	if req.Conversation && !req.DryRun {
		if err := c.cli.ResumeAt(start.CLIParentID); err != nil {
			return res, err
		}
		c.mu.Lock()
		c.resumeAt = start.CLIParentID
		c.tr.RewindTo(start.CLIParentID)
		if start.CLIParentID == "" {
			c.fork = false
		}
		c.mu.Unlock()
	}
	if !req.DryRun {
		c.mu.Lock()
		if e := c.stream.publishJSON(clientevent.Rewound{Type: "rewound", MessageID: req.MessageID, Turn: turn, Files: res.Files,
			Conversation: req.Conversation, Commit: commit}, false, false); e != nil {
			c.observeLocked(e, nil)
		}
		c.persistLocked()
		c.mu.Unlock()
	}
	return res, nil
}

// userTurn is the turn of a rich-history user message id (turn-N-user).
func userTurn(id string) (int, bool) {
	rest, ok := strings.CutPrefix(id, "turn-")
	if !ok {
		return 0, false
	}
	num, ok := strings.CutSuffix(rest, "-user")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(num)
	return n, err == nil && n > 0
}

// turnStart is the turn_start event of turn.
func (c *Session) turnStart(turn int) (clientevent.TurnStart, bool) {
	for _, ev := range c.stream.Events(0) {
		if ev.Turn == turn && ev.Type == "turn_start" {
			var e clientevent.TurnStart
			if json.Unmarshal(ev.Line, &e) == nil {
				return e, true
			}
		}
	}
	return clientevent.TurnStart{}, false
}
