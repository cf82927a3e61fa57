package relay

import (
	"context"
	"encoding/json"

	"github.com/majorhq/major/supervisor"
)

// CLI is what a chat needs from the CLI that runs its turns. It is small
// so that the chat's bookkeeping (queue, questions, history, the HTTP API
// above it) can be tested with a fake instead of the real claude process.
type CLI interface {
	// Send starts a turn with the person's message and returns once the
	// turn's start is published on the chat's Sink (its other events
	// follow), or with the error why it never started
	// (supervisor.ErrBusy if a turn runs). The turn then ends once.
	Send(ctx context.Context, text string) error
	// SendContent is Send for a message with content blocks (images,
	// documents, attached notes, an imported conversation) before its
	// text; the turn's start names only the text.
	SendContent(ctx context.Context, text string, blocks []json.RawMessage) error
	// Interrupt stops the running turn; supervisor.ErrNotRunning if none,
	// and then the end of every turn it ran is published.
	Interrupt(ctx context.Context) error
	// Steer gives the person's message with the id id to the running
	// turn (supervisor.EventSteered follows when it went in,
	// supervisor.EventSteerDropped if the turn ended first);
	// supervisor.ErrNotRunning if none runs.
	Steer(ctx context.Context, id, text string) error
	// SetWaiting marks the running turn as waiting for the person.
	SetWaiting(waiting bool)
	// State reports whether a turn runs or waits.
	State() supervisor.State
	// CLISessionID is the CLI's id for the conversation, to resume it.
	CLISessionID() string
	// Settings are the model, permission mode, thinking budget and limits
	// the next turns run with; Configure replaces them (a live CLI gets
	// the change at once; the CLI's refusal is the error).
	Settings() supervisor.Settings
	Configure(ctx context.Context, set supervisor.Settings) error
	// SetLimits sets only the budget and the agent-turn bound of the
	// next turns (see supervisor.CLI.SetLimits).
	SetLimits(budgetUSD float64, maxTurns int)
	// RewindFiles restores (dryRun: lists) the files the CLI changed
	// since the message with that CLI id; supervisor.ErrBusy during a turn.
	RewindFiles(ctx context.Context, messageID string, dryRun bool) (supervisor.RewindResult, error)
	// ResumeAt makes the next turn continue the conversation from the
	// entry with that CLI id, dropping what came after it; "" starts a
	// fresh conversation. supervisor.ErrBusy during a turn.
	ResumeAt(entry string) error
	// StopIfIdle ends the live process if no turn runs, so another
	// writer (a terminal) can take the conversation; the next turn
	// resumes it. It reports whether a process was stopped.
	StopIfIdle() bool
	// Resume makes the next turn resume the CLI conversation id.
	Resume(cliSessionID string)
	// Close stops the CLI for good.
	Close() error
}

var _ CLI = (*supervisor.CLI)(nil)
