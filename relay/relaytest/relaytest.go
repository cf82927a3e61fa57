// Package relaytest provides a fake of the CLI a relay chat drives, so the
// chat's bookkeeping and the HTTP API above it can be tested in
// milliseconds, without the claude binary. It owns no goroutines: every
// event the fake publishes is published on the caller's goroutine. It must
// not be imported by non-test code.
package relaytest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/relay"
	"github.com/majorhq/major/supervisor"
)

// CLI is a fake relay.CLI. Each method calls its function field when set;
// otherwise it plays a CLI that starts a turn on Send (publishing the turn
// start on Sink) and keeps it open until Reply, Fail or Interrupt ends it.
// Its turns are numbered as the supervisor numbers them. For the chat's
// defences it can also break the rule of a turn: a Send with a Fault
// (NextFault), and events published whatever its state (Emit).
type CLI struct {
	// Sink receives the turns' events, as the chat given to the Launcher.
	Sink supervisor.Sink
	// AutoReply, when set, ends each turn the default Send starts at
	// once with the reply it returns, unless it returns false: that turn
	// stays open.
	AutoReply func(message string) (reply string, end bool)
	// Usage, when set, is what each turn Reply ends reports using.
	Usage *supervisor.Usage
	// CanUseTool answers UseTool, as the chat answers the real CLI's
	// can_use_tool requests; the Launcher sets it when it has a Policy.
	CanUseTool func(ctx context.Context, req *supervisor.ControlRequest) (supervisor.PermissionResult, error)
	// Pool, when set, gives each turn the default Send starts a slot of
	// Person's, held until the turn ends: Send waits for it as the real
	// CLI waits for a slot for its process (publishing that it waits)
	// and fails with the pool's error when none frees in time.
	Pool   *supervisor.Pool
	Person string

	SendFunc      func(ctx context.Context, text string) error
	InterruptFunc func(ctx context.Context) error
	// SteerFunc replaces the fake's Steer; HoldSteers keeps the messages
	// given to the running turn back until TakeSteers (as the CLI does
	// until its next model request), else they go in at once.
	SteerFunc        func(ctx context.Context, id, text string) error
	HoldSteers       bool
	SetWaitingFunc   func(waiting bool)
	StateFunc        func() supervisor.State
	CLISessionIDFunc func() string
	CloseFunc        func() error
	// ConfigureFunc, RewindFilesFunc and ResumeAtFunc replace the fake's
	// own: it keeps the settings, has no file checkpoints and records
	// where the conversation resumes.
	ConfigureFunc   func(ctx context.Context, set supervisor.Settings) error
	RewindFilesFunc func(ctx context.Context, messageID string, dryRun bool) (supervisor.RewindResult, error)
	ResumeAtFunc    func(entry string) error

	mu       sync.Mutex
	turn     int
	fault    Fault
	resumed  string
	stopped  int
	running  bool
	waiting  bool
	closed   bool
	sent     []string
	blocks   [][]json.RawMessage
	settings supervisor.Settings
	resumeAt []string
	// release gives back the running turn's pool slot.
	release func()
	// streamed is the text the running turn streamed so far.
	streamed strings.Builder
	// steers are the messages given to the running turn, not gone in.
	steers []steer
	// steered are the messages that went into turns, in order.
	steered []string
}

// steer is a message given to the running turn.
type steer struct{ id, text string }

// Settings returns the settings the fake was last configured with.
func (f *CLI) Settings() supervisor.Settings {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.settings
}

// Configure calls ConfigureFunc (keeping set only if it succeeds), or
// keeps set.
func (f *CLI) Configure(ctx context.Context, set supervisor.Settings) error {
	if f.ConfigureFunc != nil {
		if err := f.ConfigureFunc(ctx, set); err != nil {
			return err
		}
	}
	f.mu.Lock()
	f.settings = set
	f.mu.Unlock()
	return nil
}

// SetLimits keeps the budget and the turn bound in the settings.
func (f *CLI) SetLimits(budgetUSD float64, maxTurns int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settings.BudgetUSD, f.settings.MaxTurns = budgetUSD, maxTurns
}

// RewindFiles calls RewindFilesFunc, or answers that there is no
// checkpoint.
func (f *CLI) RewindFiles(ctx context.Context, messageID string, dryRun bool) (supervisor.RewindResult, error) {
	if f.RewindFilesFunc != nil {
		return f.RewindFilesFunc(ctx, messageID, dryRun)
	}
	return supervisor.RewindResult{Error: "No file checkpoint found for this message."}, nil
}

// ResumeAt calls ResumeAtFunc, or records entry (supervisor.ErrBusy
// during a turn).
func (f *CLI) ResumeAt(entry string) error {
	if f.ResumeAtFunc != nil {
		return f.ResumeAtFunc(entry)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.running {
		return supervisor.ErrBusy
	}
	f.resumeAt = append(f.resumeAt, entry)
	return nil
}

// ResumedAt is the entries ResumeAt recorded, in order.
func (f *CLI) ResumedAt() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.resumeAt...)
}

var _ relay.CLI = (*CLI)(nil)

// Fault is a way the fake's Send breaks the rule of a turn, as a CLI with a
// lifecycle race would.
type Fault int

// The faults of Send.
const (
	// NoFault: the turn starts, and ends once something ends it.
	NoFault Fault = iota
	// EndBeforeStart: the turn's end (crashed) is published before its
	// start, and the fake then forgets the turn, as a CLI did whose
	// process died as the message went to it.
	EndBeforeStart
	// NoStart: Send takes the message and returns without starting a turn.
	NoStart
	// Forgotten: the turn starts and the fake forgets it: it never ends
	// and the fake is idle.
	Forgotten
	// FailAfterStart: the turn starts and Send returns an error without
	// ending it.
	FailAfterStart
)

// ErrFault is what Send returns for FailAfterStart.
var ErrFault = errors.New("relaytest: the fake failed after the turn started")

// NextFault makes the next Send (the default one) break the rule as f
// says.
func (f *CLI) NextFault(fault Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fault = fault
}

// Emit publishes ev as it is, whatever the fake's state: an end with no
// start, an end of another turn, a message after the end.
func (f *CLI) Emit(ev supervisor.Event) { f.publish(ev) }

// Turn is the number of the fake's last turn (0: none yet).
func (f *CLI) Turn() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.turn
}

// TextEvent is a CLI message that streams delta, as the CLI streams its
// answer.
func TextEvent(delta string) supervisor.Event {
	return supervisor.Event{Kind: supervisor.EventCLI, Msg: message(map[string]any{
		"type":  "stream_event",
		"event": map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": delta}},
	})}
}

// Send calls SendFunc, or starts a turn: supervisor.ErrClosed after Close,
// supervisor.ErrBusy while a turn runs. A fault set by NextFault changes
// what it does.
func (f *CLI) Send(ctx context.Context, text string) error {
	if f.SendFunc != nil {
		return f.SendFunc(ctx, text)
	}
	f.mu.Lock()
	switch {
	case f.closed:
		f.mu.Unlock()
		return supervisor.ErrClosed
	case f.running:
		f.mu.Unlock()
		return supervisor.ErrBusy
	}
	f.running = true
	f.mu.Unlock()
	release, err := f.holdSlot(ctx)
	f.mu.Lock()
	if err != nil {
		f.running = false
		f.mu.Unlock()
		return err
	}
	f.release = release
	id := fmt.Sprintf("fake-message-%d", len(f.sent)+1)
	f.turn++
	turn := f.turn
	fault := f.fault
	f.fault = NoFault
	f.mu.Unlock()
	switch fault {
	case EndBeforeStart:
		f.publish(supervisor.Event{Kind: supervisor.EventTurnEnd, Turn: turn, Err: supervisor.ErrProcessExited})
	case NoStart:
		f.end()
		return nil
	}
	// The turn starts before Sent shows its message, as the real CLI's
	// turn starts before the message reaches it: a test that waits for
	// the message and then streams the answer must find the turn open.
	f.publish(supervisor.Event{Kind: supervisor.EventTurnStart, Turn: turn, Text: text, MessageID: id})
	f.mu.Lock()
	f.sent = append(f.sent, text)
	f.mu.Unlock()
	switch fault {
	case Forgotten, EndBeforeStart:
		f.end()
		return nil
	case FailAfterStart:
		f.end()
		return ErrFault
	}
	if f.AutoReply != nil {
		if reply, end := f.AutoReply(text); end {
			f.Reply(reply)
		}
	}
	return nil
}

// SendContent records the blocks (Blocks) and then is Send.
func (f *CLI) SendContent(ctx context.Context, text string, blocks []json.RawMessage) error {
	f.mu.Lock()
	f.blocks = append(f.blocks, blocks)
	f.mu.Unlock()
	return f.Send(ctx, text)
}

// Blocks are the content blocks of each message sent with SendContent, in
// order.
func (f *CLI) Blocks() [][]json.RawMessage {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]json.RawMessage(nil), f.blocks...)
}

// holdSlot takes a slot of the Pool for a turn (a no-op without a Pool),
// publishing supervisor.EventSlotWait first when it must wait for one.
func (f *CLI) holdSlot(ctx context.Context) (func(), error) {
	if f.Pool == nil {
		return func() {}, nil
	}
	// A Hold whose context is already over takes only a slot that is free
	// now.
	now, cancel := context.WithCancel(ctx)
	cancel()
	if release, err := f.Pool.Hold(now, f.Person); err == nil {
		return release, nil
	}
	f.publish(supervisor.Event{Kind: supervisor.EventSlotWait})
	return f.Pool.Hold(ctx, f.Person)
}

// UseTool asks CanUseTool whether the running turn may use tool with
// input (any value that encodes to JSON), as the real CLI does before it
// runs a tool outside the allowed set, and returns the answer.
func (f *CLI) UseTool(ctx context.Context, tool string, input any) (supervisor.PermissionResult, error) {
	raw, err := json.Marshal(input)
	if err != nil {
		return supervisor.PermissionResult{}, err
	}
	if f.CanUseTool == nil {
		return supervisor.PermissionResult{Allow: true, UpdatedInput: raw}, nil
	}
	return f.CanUseTool(ctx, &supervisor.ControlRequest{Subtype: "can_use_tool", ToolName: tool, Input: raw})
}

// Interrupt calls InterruptFunc, or ends the running turn as interrupted
// (supervisor.ErrNotRunning when none runs).
func (f *CLI) Interrupt(ctx context.Context) error {
	if f.InterruptFunc != nil {
		return f.InterruptFunc(ctx)
	}
	if !f.end() {
		return supervisor.ErrNotRunning
	}
	f.publish(supervisor.Event{Kind: supervisor.EventTurnEnd, Turn: f.Turn(), Interrupted: true})
	return nil
}

// Steer calls SteerFunc, or gives text to the running turn: it goes in at
// once (supervisor.EventSteered), or with HoldSteers at TakeSteers;
// supervisor.ErrNotRunning with no turn running.
func (f *CLI) Steer(ctx context.Context, id, text string) error {
	if f.SteerFunc != nil {
		return f.SteerFunc(ctx, id, text)
	}
	f.mu.Lock()
	if !f.running {
		f.mu.Unlock()
		return supervisor.ErrNotRunning
	}
	f.steers = append(f.steers, steer{id, text})
	hold := f.HoldSteers
	f.mu.Unlock()
	if !hold {
		f.TakeSteers()
	}
	return nil
}

// TakeSteers hands the messages given to the running turn to the model,
// as the CLI does at the turn's next request.
func (f *CLI) TakeSteers() {
	f.mu.Lock()
	in := f.steers
	f.steers = nil
	for _, st := range in {
		f.steered = append(f.steered, st.text)
	}
	f.mu.Unlock()
	for _, st := range in {
		f.publish(supervisor.Event{Kind: supervisor.EventSteered, Text: st.text, MessageID: st.id})
	}
}

// Steered is the messages that went into turns, in order.
func (f *CLI) Steered() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.steered...)
}

// SetWaiting calls SetWaitingFunc, or records the state.
func (f *CLI) SetWaiting(waiting bool) {
	if f.SetWaitingFunc != nil {
		f.SetWaitingFunc(waiting)
		return
	}
	f.mu.Lock()
	f.waiting = waiting
	f.mu.Unlock()
}

// State calls StateFunc, or reports the fake's own state.
func (f *CLI) State() supervisor.State {
	if f.StateFunc != nil {
		return f.StateFunc()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case !f.running:
		return supervisor.StateIdle
	case f.waiting:
		return supervisor.StateWaiting
	}
	return supervisor.StateRunning
}

// CLISessionID calls CLISessionIDFunc, or returns "".
func (f *CLI) CLISessionID() string {
	if f.CLISessionIDFunc != nil {
		return f.CLISessionIDFunc()
	}
	return ""
}

// StopIfIdle counts the call and reports whether no turn ran.
func (f *CLI) StopIfIdle() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.running {
		return false
	}
	f.stopped++
	return true
}

// Resume records the conversation the next turn resumes.
func (f *CLI) Resume(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if id != "" {
		f.resumed = id
	}
}

// Resumed is the conversation id last given to Resume.
func (f *CLI) Resumed() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.resumed
}

// Close calls CloseFunc, or marks the fake closed (idempotent).
func (f *CLI) Close() error {
	if f.CloseFunc != nil {
		return f.CloseFunc()
	}
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	return nil
}

// Sent is the messages the default Send took, in order.
func (f *CLI) Sent() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.sent...)
}

// Stream sends delta as a piece of the running turn's answer, as the CLI
// streams partial messages. It reports whether a turn was running.
func (f *CLI) Stream(delta string) bool {
	f.mu.Lock()
	if !f.running {
		f.mu.Unlock()
		return false
	}
	first := f.streamed.Len() == 0
	f.streamed.WriteString(delta)
	f.mu.Unlock()
	if first {
		f.publish(supervisor.Event{Kind: supervisor.EventCLI, Msg: message(map[string]any{
			"type":  "stream_event",
			"event": map[string]any{"type": "message_start", "message": map[string]any{"id": "msg_fake", "role": "assistant"}},
		})})
	}
	f.publish(supervisor.Event{Kind: supervisor.EventCLI, Msg: message(map[string]any{
		"type":  "stream_event",
		"event": map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": delta}},
	})})
	return true
}

// Reply ends the running turn successfully with the assistant's text, as
// the CLI would: an assistant message, then the result. When the turn
// streamed, text is streamed too and the message holds the whole answer.
// It reports whether a turn was running.
func (f *CLI) Reply(text string) bool {
	if f.streaming() && text != "" && !f.Stream(text) {
		return false
	}
	f.mu.Lock()
	answer := f.streamed.String()
	f.mu.Unlock()
	if answer == "" {
		answer = text
	}
	if !f.end() {
		return false
	}
	f.publish(supervisor.Event{Kind: supervisor.EventCLI, Msg: message(map[string]any{
		"type":    "assistant",
		"message": map[string]any{"id": "msg_fake", "role": "assistant", "content": []any{map[string]any{"type": "text", "text": answer}}},
	})})
	result := message(map[string]any{"type": "result", "subtype": "success", "result": answer})
	f.publish(supervisor.Event{Kind: supervisor.EventCLI, Msg: result})
	f.publish(supervisor.Event{Kind: supervisor.EventTurnEnd, Turn: f.Turn(), Msg: result, Usage: f.Usage})
	return true
}

// Fail ends the running turn with err, as a CLI that died would. It
// reports whether a turn was running.
func (f *CLI) Fail(err error) bool {
	if !f.end() {
		return false
	}
	f.publish(supervisor.Event{Kind: supervisor.EventTurnEnd, Turn: f.Turn(), Err: err})
	return true
}

// end marks the running turn over, dropping the messages given to it
// that did not go in (supervisor.EventSteerDropped), as the CLI does;
// false if none ran.
func (f *CLI) end() bool {
	f.mu.Lock()
	if !f.running {
		f.mu.Unlock()
		return false
	}
	f.running, f.waiting = false, false
	f.streamed.Reset()
	if f.release != nil {
		f.release()
		f.release = nil
	}
	dropped := f.steers
	f.steers = nil
	f.mu.Unlock()
	for _, st := range dropped {
		f.publish(supervisor.Event{Kind: supervisor.EventSteerDropped, Text: st.text, MessageID: st.id})
	}
	return true
}

// streaming reports whether the running turn streamed text.
func (f *CLI) streaming() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.streamed.Len() > 0
}

func (f *CLI) publish(ev supervisor.Event) {
	if ev.Time.IsZero() {
		ev.Time = time.Now()
	}
	if f.Sink != nil {
		f.Sink.Publish(ev)
	}
}

// message is v as a CLI output line.
func message(v any) *supervisor.Message {
	line, err := json.Marshal(v)
	if err != nil {
		panic(err) // a literal above that does not encode is a bug here
	}
	m, err := supervisor.DecodeMessage(line)
	if err != nil {
		panic(err)
	}
	return m
}

// Launcher records the fake CLI of every chat it launches, by chat id.
type Launcher struct {
	// New, when set, builds each fake (its Sink is set after); default a
	// plain CLI.
	New func(p relay.SessionParams) *CLI
	// Policy, when set, is how each fake's chat answers its UseTool
	// (CLI.CanUseTool).
	Policy *relay.AskPolicy
	// Pool, when set, is each fake's Pool, for the chat's person.
	Pool *supervisor.Pool

	mu   sync.Mutex
	clis map[string]*CLI
}

var _ relay.Launcher = (*Launcher)(nil)

// Launch implements relay.Launcher.
func (l *Launcher) Launch(p relay.SessionParams) relay.CLI {
	f := &CLI{}
	if l.New != nil {
		f = l.New(p)
	}
	f.Sink = p.Sink
	if l.Policy != nil && p.Chat != nil {
		f.CanUseTool = p.Chat.CanUseTool(*l.Policy)
	}
	if l.Pool != nil {
		f.Pool, f.Person = l.Pool, p.Person
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.clis == nil {
		l.clis = map[string]*CLI{}
	}
	l.clis[p.ID] = f
	return f
}

// CLI is the fake of the chat with id, or nil.
func (l *Launcher) CLI(id string) *CLI {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.clis[id]
}

// NewRegistry returns a registry whose chats run on fake CLIs, closed when
// the test ends. cfg's Launcher and Logger are set here.
func NewRegistry(tb testing.TB, cfg relay.RegistryConfig) (*relay.Registry, *Launcher) {
	tb.Helper()
	l := &Launcher{}
	cfg.Launcher = l
	cfg.Logger = zerolog.New(zerolog.NewTestWriter(tb)).Level(zerolog.WarnLevel)
	s, err := relay.NewRegistry(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	return s, l
}
