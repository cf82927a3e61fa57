package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/majorhq/major/clientevent"
	"github.com/majorhq/major/vault"
)

// What each turn changed in the person's notes comes from the commits the
// server makes at a turn's end: right after the turn-end hook, the
// session's newest commit (one whose message names the session) is
// compared with the last one the session knew; a new one is the turn's,
// and a changes event with its files goes out in the turn, before its
// done. A rewind's commit is noted in its rewound event, so it is never
// taken for the next turn's. The events are the record: the changes list
// and each turn's diff are read from them, after a restart too.

// Commits reads the vault's commits of a session (vault.GitSync).
type Commits interface {
	// SessionHead is the newest commit whose message names the session,
	// "" when there is none.
	// (made since the session's start).
	SessionHead(ctx context.Context, sessionID string, since time.Time) (string, error)
	// CommitFiles lists what commit changed in person's folder, and
	// CommitDiff is its diff there.
	CommitFiles(ctx context.Context, person, commit string) ([]vault.FileChange, error)
	CommitDiff(ctx context.Context, person, commit string) (string, error)
}

var _ Commits = (*vault.GitSync)(nil)

// changesEvent says what a turn changed in the person's folder: the
// commit its end made, and the files.
type changesEvent struct {
	Type   string             `json:"type"`
	Commit string             `json:"commit"`
	Files  []vault.FileChange `json:"files"`
}

func (changesEvent) EventType() string { return "changes" }

// TurnChanges is what one turn changed, as the changes endpoint lists it.
type TurnChanges struct {
	Turn      int                `json:"turn"`
	MessageID string             `json:"message_id"`
	Commit    string             `json:"commit"`
	Files     []vault.FileChange `json:"files"`
}

// ErrNoChanges is a turn that changed no file of the person's.
var ErrNoChanges = errors.New("that turn changed none of your notes")

// noteCommitLocked keeps the commit a changes or rewound event names as
// the session's newest known. c.mu is held.
func (c *Session) noteCommitLocked(ev *Event, body clientevent.Body) {
	var e struct {
		Commit string `json:"commit"`
	}
	switch b := body.(type) {
	case changesEvent:
		e.Commit = b.Commit
	case clientevent.Rewound:
		e.Commit = b.Commit
	default:
		_ = json.Unmarshal(ev.Line, &e)
	}
	if e.Commit != "" {
		c.lastCommit = e.Commit
	}
}

// newCommit is the session's newest commit if it is one the session did
// not know yet, "" otherwise (or when there are no commits to read).
func (r *Registry) newCommit(ctx context.Context, c *Session) string {
	if r.cfg.Commits == nil {
		return ""
	}
	head, err := r.cfg.Commits.SessionHead(ctx, c.ID, c.Created)
	if err != nil {
		c.log.Warn().Err(err).Msg("read the session's commits")
		return ""
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if head == c.lastCommit {
		return ""
	}
	return head
}

// turnChanges is the changes event of a turn that just ended (its end
// hook has committed), or nil when it committed nothing of the person's.
func (r *Registry) turnChanges(ctx context.Context, c *Session) clientevent.Body {
	commit := r.newCommit(ctx, c)
	if commit == "" {
		return nil
	}
	files, err := r.cfg.Commits.CommitFiles(ctx, c.Person, commit)
	if err != nil {
		c.log.Warn().Err(err).Str("commit", commit).Msg("read a turn's commit")
		return nil
	}
	c.mu.Lock()
	c.lastCommit = commit
	c.mu.Unlock()
	if len(files) == 0 {
		return nil
	}
	return changesEvent{Type: "changes", Commit: commit, Files: files}
}

// Changes lists, per turn, the files the turn changed in the person's
// folder, oldest turn first.
func (c *Session) Changes() []TurnChanges {
	out := []TurnChanges{}
	for _, ev := range c.stream.Events(0) {
		if ev.Type != "changes" {
			continue
		}
		var e changesEvent
		if json.Unmarshal(ev.Line, &e) != nil {
			continue
		}
		out = append(out, TurnChanges{Turn: ev.Turn, MessageID: "turn-" + strconv.Itoa(ev.Turn) + "-user", Commit: e.Commit, Files: e.Files})
	}
	return out
}

// TurnDiff is one turn's changes with their unified diff.
type TurnDiff struct {
	TurnChanges
	Diff string `json:"diff"`
}

// Diff is the unified diff of what turn changed in the person's folder;
// ErrNoChanges when it changed nothing.
func (r *Registry) Diff(ctx context.Context, c *Session, turn int) (TurnDiff, error) {
	for _, ch := range c.Changes() {
		if ch.Turn != turn {
			continue
		}
		if r.cfg.Commits == nil {
			break
		}
		diff, err := r.cfg.Commits.CommitDiff(ctx, c.Person, ch.Commit)
		if err != nil {
			return TurnDiff{}, fmt.Errorf("diff of turn %d: %w", turn, err)
		}
		return TurnDiff{TurnChanges: ch, Diff: diff}, nil
	}
	return TurnDiff{}, ErrNoChanges
}
