package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/majorhq/major/clihome"
)

// entryID is the form the CLI gives its transcript's entries (a UUID),
// loosely: anything in the sandbox can write onto the CLI's output, and
// an entry's id is kept with the session and put on a command line
// (--resume-session-at=).
var entryID = regexp.MustCompile(`^[0-9A-Za-z-]{1,64}$`)

// IsEntryID reports whether id has the form of the CLI's entry ids.
func IsEntryID(id string) bool { return entryID.MatchString(id) }

// Errors a CLI returns; callers test them with errors.Is.
var (
	ErrBusy       = errors.New("session is already running a turn")
	ErrNotRunning = errors.New("session is not running a turn")
	ErrClosed     = errors.New("session is closed")
	ErrStalled    = errors.New("claude stalled: no output for too long")
)

// EventKind says what an Event carries.
type EventKind int

// The kinds of Event a CLI publishes.
const (
	// EventCLI carries one message from the CLI, unchanged, in Msg.
	EventCLI EventKind = iota
	// EventTurnStart opens a turn; Text is the person's message.
	EventTurnStart
	// EventTurnEnd closes a turn, exactly once per EventTurnStart and
	// never before it: Msg is the CLI's result, or Err says why the turn
	// ended without one.
	EventTurnEnd
	// EventNotice is something the person should know; Text says what.
	EventNotice
	// EventSlotWait says that the next turn waits for a free process slot
	// (the Pool is full); its EventTurnStart follows once it has one.
	EventSlotWait
	// EventSteered says that a message given to the running turn (Steer)
	// went in: the CLI handed it to the model. Text is the message,
	// MessageID its id.
	EventSteered
	// EventSteerDropped says that a message given to the running turn
	// never went in: the turn ended first (interrupted, failed, closed).
	// Text and MessageID as for EventSteered; the turn's end follows.
	EventSteerDropped
)

// Event is what a CLI publishes to its Sink.
type Event struct {
	Kind EventKind
	// Turn is, on EventTurnStart and EventTurnEnd, the number of the
	// CLI's turn (from 1), so a Sink can tell which start an end closes.
	Turn        int
	Msg         *Message
	Text        string
	Err         error
	Interrupted bool
	Time        time.Time
	// MessageID is, on EventTurnStart, EventSteered and
	// EventSteerDropped, the id the person's message has in the CLI's
	// conversation (what RewindFiles takes).
	MessageID string
	// Process is, on EventTurnStart, where the turn's process comes from:
	// ProcessRunning, ProcessWarm or ProcessStart (for traces).
	Process string
	// Usage is, on EventTurnEnd, what the turn used, when the CLI said.
	Usage *Usage
}

// Where a turn's process comes from (Event.Process).
const (
	// ProcessRunning: the session's process was alive already.
	ProcessRunning = "running"
	// ProcessWarm: a process the warm pool started ahead was taken.
	ProcessWarm = "warm"
	// ProcessStart: a process is started for the turn.
	ProcessStart = "start"
)

// Usage is what one turn used: the sum over every API request of the
// turn, from the CLI's own figures.
type Usage struct {
	CostUSD                  float64               `json:"cost_usd"`
	InputTokens              int64                 `json:"input_tokens"`
	OutputTokens             int64                 `json:"output_tokens"`
	CacheReadInputTokens     int64                 `json:"cache_read_input_tokens"`
	CacheCreationInputTokens int64                 `json:"cache_creation_input_tokens"`
	WebSearchRequests        int64                 `json:"web_search_requests,omitempty"`
	NumTurns                 int                   `json:"num_turns"`
	DurationMS               int64                 `json:"duration_ms"`
	APIDurationMS            int64                 `json:"api_duration_ms"`
	Models                   map[string]ModelUsage `json:"models,omitempty"`
}

// Settings are the choices of a session that can change between turns.
// A live process gets a change through the CLI's control requests
// (set_model, set_permission_mode, set_max_thinking_tokens); a process
// started later, through its flags. Zero values keep the Spec's.
type Settings struct {
	Model          string
	PermissionMode string
	// MaxThinkingTokens bounds extended thinking (0: the CLI's default);
	// Effort is the effort level of adaptive thinking ("": the default).
	MaxThinkingTokens int
	Effort            string
	// MaxTurns bounds the agent turns of each message (0: no bound).
	MaxTurns int
	// BudgetUSD is what the session may still spend (0: no bound). The
	// CLI counts its budget from the process's start, so a live process
	// whose own cap no longer matches is replaced before the next turn
	// (it resumes the conversation).
	BudgetUSD float64
}

// Sink receives a CLI's events in order. Publish must not block.
type Sink interface {
	Publish(Event)
}

// SinkFunc adapts a function to Sink.
type SinkFunc func(Event)

// Publish calls f.
func (f SinkFunc) Publish(ev Event) { f(ev) }

// State is what a session is doing.
type State string

// CLI states, as the sessions list shows them.
const (
	StateIdle    State = "idle"
	StateRunning State = "running"
	StateWaiting State = "waiting" // a turn waits for the person (a question or a permission)
)

// CLIConfig configures a CLI.
type CLIConfig struct {
	// ID is our own stable session id.
	ID string
	// Person owns the session; Dir is the person's vault, the CLI's cwd.
	Person string
	Dir    string
	// CLISessionID is the CLI's session id to resume, if any.
	CLISessionID string
	// Fork makes the first resume of CLISessionID a new conversation
	// (--fork-session); ResumeAt keeps the resumed conversation only up
	// to that entry (--resume-session-at). Both hold until a turn of the
	// resumed process has completed.
	Fork     bool
	ResumeAt string
	// Settings are the session's settings at start.
	Settings Settings
	Spec     Spec
	// Handlers builds the control handlers for this session.
	Handlers func(*CLI) Handlers
	Sink     Sink
	// StallTimeout kills a CLI that writes nothing for this long while a
	// turn runs and no question waits for the person; 0 disables.
	StallTimeout time.Duration
	// Pool, when set, bounds live processes across sessions.
	Pool   *Pool
	Logger zerolog.Logger
	// OnSendStep, when set, is called at each step of Send with the
	// process the turn runs on (nil while it has none): a seam for tests
	// that kill the process at each point. Never set in production.
	OnSendStep func(step SendStep, p *Process)
}

// SendStep is a point of Send where a process can die (CLIConfig.OnSendStep).
type SendStep int

// The steps of Send, in order.
const (
	// StepBeforeStart: the turn holds the session, and its process if one
	// lives; its start is not published yet.
	StepBeforeStart SendStep = iota
	// StepAfterStart: the turn's start is published; its process, if
	// one lives, is not the turn's yet.
	StepAfterStart
	// StepBeforeWrite: the turn has started and has its process; its
	// message is not written yet.
	StepBeforeWrite
	// StepAfterWrite: the message was written to the process.
	StepAfterWrite
)

func (s SendStep) String() string {
	switch s {
	case StepBeforeStart:
		return "before start"
	case StepAfterStart:
		return "after start"
	case StepBeforeWrite:
		return "before write"
	case StepAfterWrite:
		return "after write"
	}
	return fmt.Sprintf("SendStep(%d)", int(s))
}

// CLI runs the claude of one chat session: one long-lived process at a time, one
// turn at a time. A process that died is replaced on the next turn with
// --resume, so the conversation continues.
//
// A turn starts once and ends once, whatever dies when:
//   - Send claims the turn (running) and may then wait for a slot and a
//     process; nothing can end the turn before its start is published
//     (started), so a process that dies meanwhile only means the turn
//     needs another one;
//   - only a started turn ends, once: every end (the CLI's result, the
//     process's exit, the stall watchdog, an interrupt, a failed start)
//     goes through endTurn, which checks and clears running under mu;
//   - the start and the end are decided and published under turnMu, so
//     no end is published before its start;
//   - the message is written to a process only if, checked under mu
//     with the process's write lock held (it cannot be reaped meanwhile),
//     its turn is still the one running and that process is still the
//     turn's (written); a turn whose message was not written ends without
//     it ever reaching the model;
//   - while its message is not written, only Send (and the exit of the
//     session's process) ends a turn: an interrupt cancels Send's waits
//     and Send ends it, so no next turn claims the session while this
//     Send still starts a process.
type CLI struct {
	cfg CLIConfig
	log zerolog.Logger

	// turnMu orders the publication of turn starts and ends (see above).
	// It is taken before mu, and held while the Sink publishes.
	turnMu sync.Mutex

	mu           sync.Mutex
	proc         *Process
	cliSessionID string
	// running: a turn holds the session (from Send on); started: its
	// start is published; written: its message went to proc.
	running, started, written bool
	// cancelWait ends the waits of the running turn's Send (for a slot,
	// for a process), for an interrupt.
	cancelWait   context.CancelFunc
	waiting      int
	turn         int
	interrupting bool
	closed       bool
	lastOutput   time.Time
	lastActivity time.Time
	stallTimer   *time.Timer
	killTimer    *time.Timer
	spawning     *Process // started, not yet initialized

	// holding: a rewind uses the process between turns.
	holding  bool
	settings Settings
	fork     bool
	resumeAt string
	// What the live process was started with and has spent so far (the
	// CLI's totals count from its start).
	procCap   float64
	procTurns int
	procCost  float64
	procUsage map[string]ModelUsage
	// pending is what the live process was started with that holds until
	// one of its turns completes (fork, resume-at).
	pendingFork     bool
	pendingResumeAt string

	// adopted: the running turn runs in a process taken from the warm
	// pool, whose replacement waits for the turn's first output.
	adopted bool
	// turnSent: the running turn's own message is with the CLI; steers
	// given before wait for it. steers are the messages given to the
	// running turn that the CLI has not handed to the model yet, in order.
	turnSent bool
	steers   []steer
	// parts is what the results of the running turn's earlier parts
	// reported (a steer the turn took in after its result runs on).
	parts struct {
		turns     int
		ms, apiMS int64
		// last is the result the turn went on past, while no part has
		// started after it: if the messages it waited for are withdrawn
		// instead, it ends the turn.
		last *Message
	}
}

// steer is a message given to the running turn.
type steer struct {
	id, text string
	// written: it is with the CLI.
	written bool
}

// NewCLI returns an idle CLI; no process runs until the first turn.
func NewCLI(cfg CLIConfig) *CLI {
	if cfg.Sink == nil {
		cfg.Sink = SinkFunc(func(Event) {})
	}
	return &CLI{
		cfg:          cfg,
		log:          cfg.Logger.With().Str("session", cfg.ID).Str("person", cfg.Person).Logger(),
		cliSessionID: cfg.CLISessionID,
		lastActivity: time.Now(),
		settings:     cfg.Settings,
		fork:         cfg.Fork,
		resumeAt:     cfg.ResumeAt,
	}
}

// ID is our session id.
func (c *CLI) ID() string { return c.cfg.ID }

// Person is the session's owner.
func (c *CLI) Person() string { return c.cfg.Person }

// CLISessionID is the CLI's id for the conversation ("" before the first turn).
func (c *CLI) CLISessionID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cliSessionID
}

// Resume makes the next process resume the CLI conversation id (one that
// went on elsewhere, in a terminal); "" keeps the current one.
func (c *CLI) Resume(id string) {
	if id == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cliSessionID = id
}

// State reports whether the session is idle, running or waiting.
func (c *CLI) State() State {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case !c.running:
		return StateIdle
	case c.waiting > 0:
		return StateWaiting
	default:
		return StateRunning
	}
}

// LastActivity is when a turn last started or ended.
func (c *CLI) LastActivity() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastActivity
}

// Pid is the process id of the live CLI, or 0.
func (c *CLI) Pid() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil {
		return 0
	}
	return c.proc.Pid()
}

// Live reports whether a CLI process is running for this session.
func (c *CLI) Live() bool { return c.Pid() != 0 }

// Send starts a turn with the person's message. It returns once the
// turn's start is published and its message is with the CLI (or the turn
// has ended already, its end published too); the turn's events follow on
// the Sink. It returns an error, and publishes nothing of the turn, only
// when the turn never started: ErrBusy if a turn is running, ErrClosed,
// or why no process slot was had.
func (c *CLI) Send(ctx context.Context, text string) error {
	return c.SendContent(ctx, text, nil)
}

// SendContent is Send for a message that carries content blocks before
// its text (images, documents, attached notes; see Process.SendUser).
// The turn's start names only the text.
func (c *CLI) SendContent(ctx context.Context, text string, blocks []json.RawMessage) error {
	c.mu.Lock()
	switch {
	case c.closed:
		c.mu.Unlock()
		return ErrClosed
	case c.running || c.holding:
		c.mu.Unlock()
		return ErrBusy
	}
	c.turn++
	turn := c.turn
	c.running, c.started, c.written, c.interrupting = true, false, false, false
	// An interrupt ends the waits below (for a slot, for a process).
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c.cancelWait = cancel
	c.lastActivity = time.Now()
	c.turnSent = false
	c.parts.turns, c.parts.ms, c.parts.apiMS, c.parts.last = 0, 0, 0, nil
	var stale *Process
	if c.proc != nil && c.limitsChangedLocked() {
		// The CLI fixes its limits at start: a new process, resuming
		// the conversation, runs this turn under the new ones.
		stale, c.proc = c.proc, nil
	}
	needSlot := c.proc == nil && c.cfg.Pool != nil
	fresh := c.cliSessionID == ""
	c.mu.Unlock()
	if stale != nil {
		if err := stale.Close(); err != nil {
			c.log.Warn().Err(err).Msg("stop claude for new limits")
		}
	}

	if c.cfg.Pool != nil {
		c.cfg.Pool.Touch(c.Person())
	}
	// A new conversation starts in a process the warm pool started for
	// it, when there is one.
	process := ProcessRunning
	if needSlot && fresh && c.fitsWarm() && c.adopt() {
		needSlot, process = false, ProcessWarm
	}
	// A turn that needs a process waits for a slot before it starts, so a
	// full server answers "busy" instead of a turn that fails.
	if needSlot {
		if err := c.cfg.Pool.acquire(ctx, c); err != nil {
			return c.notStarted(turn, text, err)
		}
	}
	c.step(StepBeforeStart, c.process())
	if process == ProcessRunning && c.process() == nil {
		process = ProcessStart
	}
	id := uuid.NewString()
	if err := c.startTurn(turn, text, id, process); err != nil {
		if needSlot {
			c.cfg.Pool.unreserve(c)
		}
		return err
	}
	c.step(StepAfterStart, c.process())
	proc, err := c.ensureProcess(ctx, needSlot, turn)
	switch {
	case errors.Is(err, errTurnOver):
		return nil // it ended while it waited; its end is published
	case err != nil && c.interrupted(turn):
		c.endTurn(turn, nil, nil, true)
		return nil
	case err != nil:
		c.endTurn(turn, nil, fmt.Errorf("start turn: %w", err), false)
		return nil
	}
	c.step(StepBeforeWrite, proc)
	sent, err := proc.sendUserIf(text, blocks, id, PriorityLater, func() bool { return c.claimWrite(turn, proc) })
	switch {
	case sent:
		c.touch()
		c.step(StepAfterWrite, proc)
	case c.interrupted(turn):
		// Interrupted before its message reached the CLI: it never will.
		c.endTurn(turn, nil, nil, true)
	case err != nil:
		c.endTurn(turn, nil, fmt.Errorf("start turn: %w", err), false)
	default:
		// Ended meanwhile (its process died, it stalled): its end is
		// published and its message goes nowhere. Or its process was
		// replaced under it, which only an end does; end it anyway.
		c.endTurn(turn, nil, fmt.Errorf("start turn: %w", ErrProcessExited), false)
	}
	if sent {
		// Messages given to the turn before its own was with the CLI.
		c.sendSteers(proc, turn)
	}
	return nil
}

// sendSteers writes the messages given to turn before its own message
// was with the CLI.
func (c *CLI) sendSteers(proc *Process, turn int) {
	c.mu.Lock()
	if c.turn != turn || !c.running {
		c.mu.Unlock()
		return
	}
	c.turnSent = true
	var early []steer
	for i := range c.steers {
		if !c.steers[i].written {
			c.steers[i].written = true
			early = append(early, c.steers[i])
		}
	}
	c.mu.Unlock()
	for _, st := range early {
		if err := proc.SendUser(st.text, nil, st.id, PriorityNext); err != nil {
			c.log.Warn().Err(err).Msg("write a message for the running turn")
		}
	}
}

// Steer gives text, a message of the person's with the id id (its id in
// the conversation), to the running turn: the CLI hands it to the model
// at the turn's next request, without stopping running tools, or, when
// the turn makes no further request, runs it right after as part of the
// same turn (one EventTurnEnd for both). EventSteered says when it went
// in; a turn that ends first (interrupted, failed) drops it
// (EventSteerDropped). ErrNotRunning when no turn runs: send it as a
// turn of its own.
func (c *CLI) Steer(ctx context.Context, id, text string) error {
	c.mu.Lock()
	switch {
	case c.closed:
		c.mu.Unlock()
		return ErrClosed
	case !c.running || c.interrupting:
		c.mu.Unlock()
		return ErrNotRunning
	}
	p := c.proc
	if c.turnSent && p == nil {
		// The turn's process is gone; its end is on its way.
		c.mu.Unlock()
		return ErrNotRunning
	}
	st := steer{id: id, text: text, written: c.turnSent}
	c.steers = append(c.steers, st)
	c.mu.Unlock()
	if !st.written {
		return nil // the turn's own message goes first (Send)
	}
	if err := p.SendUser(text, nil, id, PriorityNext); err != nil {
		c.mu.Lock()
		c.steers = slices.DeleteFunc(c.steers, func(x steer) bool { return x.id == id })
		c.mu.Unlock()
		return fmt.Errorf("steer: %w", err)
	}
	return nil
}

// errTurnOver says that the turn a wait was for has ended meanwhile.
var errTurnOver = errors.New("the turn has ended")

// step calls the test seam OnSendStep, if set.
func (c *CLI) step(s SendStep, p *Process) {
	if c.cfg.OnSendStep != nil {
		c.cfg.OnSendStep(s, p)
	}
}

// process is the live process, or nil.
func (c *CLI) process() *Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.proc
}

// notStarted ends Send for a turn that never started because a wait
// failed with err: an interrupt that cancelled the wait makes it a turn
// that starts and ends interrupted at once (its message never reaches
// the CLI), so its clients see it end; any other failure frees the
// session and is Send's error.
func (c *CLI) notStarted(turn int, text string, err error) error {
	if c.interrupted(turn) {
		if err := c.startTurn(turn, text, "", ""); err != nil {
			return err
		}
		c.endTurn(turn, nil, nil, true)
		return nil
	}
	c.mu.Lock()
	if c.turn == turn {
		c.running = false
	}
	c.mu.Unlock()
	if c.cfg.Pool != nil {
		c.cfg.Pool.idle()
	}
	return err
}

// interrupted reports whether turn is running and was interrupted.
func (c *CLI) interrupted(turn int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.running && c.turn == turn && c.interrupting
}

// startTurn publishes the start of turn, which Send holds; from now on
// the turn can end. ErrClosed (and the session freed) if the session was
// closed meanwhile.
func (c *CLI) startTurn(turn int, text, messageID, process string) error {
	c.turnMu.Lock()
	defer c.turnMu.Unlock()
	c.mu.Lock()
	if c.closed {
		c.running = false
		c.mu.Unlock()
		return ErrClosed
	}
	c.started = true
	c.mu.Unlock()
	c.publish(Event{Kind: EventTurnStart, Turn: turn, Text: text, MessageID: messageID, Process: process})
	return nil
}

// claimWrite reports whether turn's message may be written to p now: the
// turn still runs, uninterrupted, and p is still the session's process.
// It is called with p's write lock held, so p cannot be reaped before
// the write.
func (c *CLI) claimWrite(turn int, p *Process) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.running || c.turn != turn || !c.started || c.interrupting || c.proc != p {
		return false
	}
	c.written = true
	return true
}

// adopt makes a ready process of the warm pool this session's and reports
// whether it did. The process started without --resume: its conversation
// becomes the session's, and its id is recorded from the turn's first
// message like any other.
func (c *CLI) adopt() (ok bool) {
	w := c.cfg.Pool.take(c)
	if w == nil {
		return false
	}
	defer func() {
		if !ok {
			// Nothing of this session's runs in it: its replacement
			// need not wait.
			c.mu.Lock()
			c.adopted = false
			c.mu.Unlock()
			c.cfg.Pool.settled(c.Person())
		}
	}()
	var h Handlers
	if c.cfg.Handlers != nil {
		h = c.cfg.Handlers(c)
	}
	if !w.bind(c, h) {
		// It exited after it was taken; the pool has forgotten it.
		return false
	}
	c.mu.Lock()
	closed := c.closed
	if !closed {
		c.proc = w.proc
		c.adopted = true
	}
	c.mu.Unlock()
	if closed {
		_ = w.proc.Close()
		return false
	}
	select {
	case <-w.proc.Done():
		// It exited before it was ours: onExit did not see it as this
		// session's process.
		c.mu.Lock()
		if c.proc == w.proc {
			c.proc = nil
		}
		c.mu.Unlock()
		return false
	default:
	}
	c.log.Info().Int("pid", w.proc.Pid()).Msg("took a started claude from the warm pool")
	return true
}

// ensureProcess returns the live process, starting (and initializing) one
// when there is none; reserved says a slot was taken for it. A resume
// the CLI cannot do starts a fresh conversation, once, and says so. For
// a turn (turn > 0) it starts nothing once the turn is over
// (errTurnOver) or interrupted (context.Canceled).
func (c *CLI) ensureProcess(ctx context.Context, reserved bool, turn int) (*Process, error) {
	c.mu.Lock()
	var stop error
	switch {
	case turn > 0 && (!c.running || c.turn != turn):
		stop = errTurnOver
	case turn > 0 && c.interrupting:
		stop = context.Canceled
	}
	p := c.proc
	resume := c.cliSessionID
	c.mu.Unlock()
	if stop != nil || p != nil {
		if reserved {
			c.cfg.Pool.unreserve(c)
		}
		if stop != nil {
			return nil, stop
		}
		return p, nil
	}
	if !reserved && c.cfg.Pool != nil {
		if err := c.cfg.Pool.acquire(ctx, c); err != nil {
			return nil, err
		}
	}

	p, err := c.spawn(ctx, resume)
	if err != nil && resume != "" && resumeFailed(err) {
		c.log.Warn().Str("cli_session", resume).Err(err).Msg("resume failed; starting a fresh conversation")
		c.publish(Event{Kind: EventNotice, Text: "The earlier conversation could not be resumed; starting a fresh one."})
		c.mu.Lock()
		c.cliSessionID = ""
		c.mu.Unlock()
		if c.cfg.Pool != nil {
			if err := c.cfg.Pool.acquire(ctx, c); err != nil {
				return nil, err
			}
		}
		p, err = c.spawn(ctx, "")
	}
	return p, err
}

// resumeFailed reports the CLI's answer to a --resume of a conversation it
// does not have. Only that starts a fresh one: any other start-up error
// must not cost the person their history.
func resumeFailed(err error) bool {
	return strings.Contains(err.Error(), "No conversation found")
}

// limitsChangedLocked reports whether the live process was started with
// other limits than the settings ask for now. c.mu is held.
func (c *CLI) limitsChangedLocked() bool {
	if c.settings.MaxTurns != c.procTurns {
		return true
	}
	if c.settings.BudgetUSD <= 0 {
		return c.procCap > 0
	}
	left := c.procCap - c.procCost
	return c.procCap <= 0 || left-c.settings.BudgetUSD > budgetSlack || c.settings.BudgetUSD-left > budgetSlack
}

// budgetSlack is how far a live process's remaining budget may be from
// the session's before the process is replaced: a cent.
const budgetSlack = 0.01

// launchSpec is the Spec a process of this session starts with now: the
// configured one with the session's settings, and for a resume the fork
// or rewind still to take.
func (c *CLI) launchSpec(resume string) Spec {
	spec := c.cfg.Spec
	c.mu.Lock()
	set := c.settings
	if resume != "" {
		spec.ForkSession, spec.ResumeAt = c.fork, c.resumeAt
	}
	c.mu.Unlock()
	if set.Model != "" {
		spec.Model = set.Model
	}
	if set.PermissionMode != "" {
		spec.PermissionMode = set.PermissionMode
	}
	if set.MaxThinkingTokens > 0 {
		spec.MaxThinkingTokens = set.MaxThinkingTokens
	}
	if set.Effort != "" {
		spec.Effort = set.Effort
	}
	spec.MaxTurns, spec.MaxBudgetUSD = set.MaxTurns, set.BudgetUSD
	return spec
}

// fitsWarm reports whether a process started with the configured Spec
// runs this session as it is set now: the warm pool starts its processes
// with that Spec, so a session with a model, mode, thinking budget or
// limits of its own starts its own.
func (c *CLI) fitsWarm() bool {
	return slices.Equal(c.launchSpec("").Args(""), c.cfg.Spec.Args(""))
}

func (c *CLI) spawn(ctx context.Context, resume string) (*Process, error) {
	spec := c.launchSpec(resume)
	var h Handlers
	if c.cfg.Handlers != nil {
		h = c.cfg.Handlers(c)
	}
	var p *Process
	ready := make(chan struct{})
	var err error
	cred := spec.credential(c.cfg.ID)
	argv := spec.Command(resume)
	p, err = StartProcess(ProcessConfig{
		Path:     argv[0],
		Args:     argv[1:],
		Dir:      c.cfg.Dir,
		Env:      spec.env(cred),
		Handlers: h,
		OnMessage: func(m *Message) {
			<-ready
			c.onMessage(p, m)
		},
		OnExit: func(err error) {
			<-ready
			cred.revoke()
			if c.cfg.Pool != nil {
				c.cfg.Pool.exited(p)
			}
			c.onExit(p, err)
		},
		Grace:  spec.grace(),
		Logger: c.log,
	})
	if err != nil {
		cred.revoke()
		if c.cfg.Pool != nil {
			c.cfg.Pool.unreserve(c)
		}
		return nil, err
	}
	if c.cfg.Pool != nil {
		c.cfg.Pool.started(p, c)
	}
	c.mu.Lock()
	closed := c.closed
	c.spawning = p
	c.mu.Unlock()
	close(ready)
	if closed {
		_ = p.Close()
		return nil, ErrClosed
	}
	c.log.Info().Int("pid", p.Pid()).Str("resume", resume).Msg("claude process started")

	// An interrupt of the turn the process starts for stops its start.
	ictx, cancel := context.WithTimeout(ctx, spec.initTimeout())
	defer cancel()
	_, err = p.Request(ictx, "initialize", spec.initializeBody())
	c.mu.Lock()
	c.spawning = nil
	if err == nil && c.closed {
		err = ErrClosed
	}
	if err == nil {
		c.proc = p
		c.procCap, c.procTurns, c.procCost, c.procUsage = spec.MaxBudgetUSD, spec.MaxTurns, 0, nil
		c.pendingFork, c.pendingResumeAt = spec.ForkSession, spec.ResumeAt
	}
	c.mu.Unlock()
	if err != nil {
		p.Kill()
		_ = p.Close()
		if r := c.cfg.Pool.noteRefusal(c.Person(), p, c.log); r != nil {
			return nil, fmt.Errorf("start claude: %w", r)
		}
		if errors.Is(err, ErrProcessExited) {
			return nil, fmt.Errorf("initialize: %w", p.Err())
		}
		return nil, fmt.Errorf("initialize: %w", err)
	}
	c.cfg.Pool.noteStarted(c.Person())
	return p, nil
}

func (c *CLI) onMessage(p *Process, m *Message) {
	c.mu.Lock()
	if c.proc != p {
		// Before initialize is answered the CLI only writes on its way out
		// (a failed --resume ends with an error result): that belongs to
		// the start-up error, not to the turn.
		starting := c.spawning == p
		c.mu.Unlock()
		if starting {
			c.log.Debug().Str("type", m.Type).Str("subtype", m.Subtype).Msg("cli output during start-up")
		}
		return
	}
	if m.SessionID != "" && (m.Type == "result" || (m.Type == "system" && m.Subtype == "init")) {
		// Anything in the sandbox can write onto the CLI's output: only
		// an id of the CLI's own form is resumed (--resume=).
		if clihome.IsConversationID(m.SessionID) {
			c.cliSessionID = m.SessionID
		} else {
			c.log.Warn().Int("bytes", len(m.SessionID)).Msg("the CLI's output named a conversation id of another form; the session keeps its own")
		}
	}
	if m.Type == "system" && m.PermissionMode != "" && c.settings.PermissionMode != "" && ChoosableMode(m.PermissionMode) {
		// The CLI changes its mode itself (an approved plan ends plan
		// mode); the next process starts in the mode it is in now.
		c.settings.PermissionMode = m.PermissionMode
	}
	// The turn's first output: the replacement of the waiting process it
	// took may start now.
	settle := c.adopted && (m.Type == "assistant" || m.Type == "result" ||
		(m.Type == "stream_event" && m.Event != nil && m.Event.Type == "content_block_delta"))
	if settle {
		c.adopted = false
	}
	var steered []steer
	if m.Type == "command_lifecycle" && (m.State == "started" || m.State == "cancelled") {
		// A message given to the turn went in, or was withdrawn.
		for i, st := range c.steers {
			if st.id == m.CommandUUID {
				steered = append(steered, st)
				c.steers = slices.Delete(c.steers, i, i+1)
				break
			}
		}
		if m.State == "started" {
			c.parts.last = nil
		}
	}
	// A result with messages given to the turn still to go in is not the
	// turn's end: the CLI runs them now, as the turn's next part.
	goesOn := m.Type == "result" && c.running && !c.interrupting && len(c.steers) > 0
	end := m
	if goesOn {
		c.parts.turns += m.NumTurns
		c.parts.ms += m.DurationMS
		c.parts.apiMS += m.DurationAPIMS
		c.parts.last = m
	}
	if m.Type == "command_lifecycle" && m.State == "cancelled" && len(steered) > 0 && len(c.steers) == 0 && c.parts.last != nil {
		// What the turn went on for was withdrawn before it ran: the
		// result it went past ends it after all.
		end = c.parts.last
		c.parts.turns -= end.NumTurns
		c.parts.ms -= end.DurationMS
		c.parts.apiMS -= end.DurationAPIMS
	}
	var usage *Usage
	ends := end.Type == "result" && !goesOn
	if ends {
		usage = c.turnUsageLocked(end)
		if !end.IsError {
			// The conversation the process was started on is now on
			// disk: a later resume continues it as it is.
			if c.pendingFork {
				c.fork, c.pendingFork = false, false
			}
			if c.pendingResumeAt != "" && c.resumeAt == c.pendingResumeAt {
				c.resumeAt, c.pendingResumeAt = "", ""
			}
		}
	}
	// A result ends the turn whose message went to this process; one
	// that comes before it (or between turns) ends nothing.
	turn, running := c.turn, c.running && c.written
	interrupted := c.interrupting
	c.mu.Unlock()
	c.touch()
	if settle {
		c.cfg.Pool.settled(c.Person())
	}

	c.publish(Event{Kind: EventCLI, Msg: m})
	for _, st := range steered {
		kind := EventSteered
		if m.State == "cancelled" {
			kind = EventSteerDropped
		}
		c.publish(Event{Kind: kind, Text: st.text, MessageID: st.id})
	}
	if ends && running {
		c.endTurnUsage(turn, end, nil, interrupted || end.TerminalReason == "aborted_streaming", usage)
	}
}

// turnUsageLocked is what the turn that m (a result) ends used: the CLI's
// totals count from the process's start, so the turn's share is the
// difference from the previous result. c.mu is held.
func (c *CLI) turnUsageLocked(m *Message) *Usage {
	if m.TotalCostUSD == nil && m.ModelUsage == nil {
		return nil
	}
	u := &Usage{NumTurns: m.NumTurns + c.parts.turns, DurationMS: m.DurationMS + c.parts.ms, APIDurationMS: m.DurationAPIMS + c.parts.apiMS}
	if m.TotalCostUSD != nil {
		u.CostUSD = max(*m.TotalCostUSD-c.procCost, 0)
		c.procCost = *m.TotalCostUSD
	}
	for name, total := range m.ModelUsage {
		prev := c.procUsage[name]
		d := ModelUsage{
			InputTokens:              total.InputTokens - prev.InputTokens,
			OutputTokens:             total.OutputTokens - prev.OutputTokens,
			CacheReadInputTokens:     total.CacheReadInputTokens - prev.CacheReadInputTokens,
			CacheCreationInputTokens: total.CacheCreationInputTokens - prev.CacheCreationInputTokens,
			WebSearchRequests:        total.WebSearchRequests - prev.WebSearchRequests,
			CostUSD:                  max(total.CostUSD-prev.CostUSD, 0),
		}
		if d == (ModelUsage{}) {
			continue
		}
		if u.Models == nil {
			u.Models = map[string]ModelUsage{}
		}
		u.Models[name] = d
		u.InputTokens += d.InputTokens
		u.OutputTokens += d.OutputTokens
		u.CacheReadInputTokens += d.CacheReadInputTokens
		u.CacheCreationInputTokens += d.CacheCreationInputTokens
		u.WebSearchRequests += d.WebSearchRequests
	}
	if m.ModelUsage != nil {
		c.procUsage = m.ModelUsage
	}
	return u
}

// onExit sees p gone. A turn that started ends with it, crashed; one
// that has not started yet only needs another process, which Send starts
// after the start.
func (c *CLI) onExit(p *Process, err error) {
	c.mu.Lock()
	if c.proc != p {
		c.mu.Unlock()
		return
	}
	c.proc = nil
	turn, started, closed := c.turn, c.running && c.started, c.closed
	interrupting := c.interrupting
	c.mu.Unlock()
	if !started {
		if err != nil {
			c.log.Warn().Err(err).Msg("claude exited between turns; the next turn resumes")
		}
		return
	}
	switch {
	case closed:
		err = ErrClosed
	case err == nil:
		err = ErrProcessExited
	}
	c.endTurn(turn, nil, err, interrupting)
}

// endTurn ends turn if it is the running one and has started, once: a
// later call for the same turn does nothing.
func (c *CLI) endTurn(turn int, result *Message, err error, interrupted bool) {
	c.endTurnUsage(turn, result, err, interrupted, nil)
}

func (c *CLI) endTurnUsage(turn int, result *Message, err error, interrupted bool, usage *Usage) {
	c.turnMu.Lock()
	defer c.turnMu.Unlock()
	c.mu.Lock()
	if !c.running || c.turn != turn || !c.started {
		c.mu.Unlock()
		return
	}
	c.running, c.started, c.written = false, false, false
	c.waiting = 0
	c.interrupting = false
	c.lastActivity = time.Now()
	stopTimer(&c.stallTimer)
	stopTimer(&c.killTimer)
	dropped := c.steers
	c.steers = nil
	settle := c.adopted
	c.adopted = false
	c.mu.Unlock()
	if settle {
		c.cfg.Pool.settled(c.Person())
	}
	if err != nil {
		c.log.Warn().Err(err).Msg("turn ended with an error")
	}
	for _, st := range dropped {
		c.publish(Event{Kind: EventSteerDropped, Text: st.text, MessageID: st.id})
	}
	c.publish(Event{Kind: EventTurnEnd, Turn: turn, Msg: result, Err: err, Interrupted: interrupted, Usage: usage})
	if c.cfg.Pool != nil {
		c.cfg.Pool.idle()
	}
}

func stopTimer(t **time.Timer) {
	if *t != nil {
		(*t).Stop()
		*t = nil
	}
}

// touch records output from the CLI and re-arms the stall watchdog,
// which watches a turn once its message is with the CLI.
func (c *CLI) touch() {
	if c.cfg.StallTimeout <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastOutput = time.Now()
	if !c.running || !c.written {
		return
	}
	if c.stallTimer == nil {
		turn := c.turn
		c.stallTimer = time.AfterFunc(c.cfg.StallTimeout, func() { c.checkStall(turn) })
	}
}

func (c *CLI) checkStall(turn int) {
	c.mu.Lock()
	c.stallTimer = nil
	if !c.running || c.turn != turn || !c.written || c.proc == nil {
		c.mu.Unlock()
		return
	}
	idle := time.Since(c.lastOutput)
	if c.waiting > 0 || idle < c.cfg.StallTimeout {
		// Waiting for the person is not a stall; output came in meanwhile.
		c.stallTimer = time.AfterFunc(max(c.cfg.StallTimeout-idle, time.Second), func() { c.checkStall(turn) })
		c.mu.Unlock()
		return
	}
	p := c.proc
	// Detached before the turn ends, so the next turn starts a fresh
	// process instead of writing to this dying one.
	c.proc = nil
	c.mu.Unlock()
	c.log.Warn().Dur("silent_ms", idle).Int("pid", p.Pid()).Msg("claude stalled; killing it")
	p.Kill()
	// The process's own reaper collects it; Wait also closes its stdin.
	c.endTurn(turn, nil, fmt.Errorf("%w (%s)", ErrStalled, idle.Round(time.Second)), false)
}

// Interrupt stops the running turn in-band; the turn ends with its result.
// If the CLI does not end the turn within grace, the process is killed and
// the turn ends with an error, so an interrupt never hangs. A turn whose
// message is not with the CLI yet stops waiting (for a slot, for its
// process) and ends interrupted at once; its message never reaches the
// CLI. ErrNotRunning if no turn runs: the end of every turn is published
// by then.
func (c *CLI) Interrupt(ctx context.Context) error {
	// Under turnMu, a turn that is no longer running has its end
	// published.
	c.turnMu.Lock()
	c.mu.Lock()
	if !c.running {
		c.mu.Unlock()
		c.turnMu.Unlock()
		return ErrNotRunning
	}
	c.interrupting = true
	turn, written := c.turn, c.written
	cancelWait := c.cancelWait
	p := c.proc
	grace := c.cfg.Spec.grace()
	if written && c.killTimer == nil && p != nil {
		c.killTimer = time.AfterFunc(grace, func() {
			c.mu.Lock()
			still := c.running && c.turn == turn
			c.killTimer = nil
			c.mu.Unlock()
			if still {
				c.log.Warn().Msg("interrupt did not end the turn; killing claude")
				p.Kill()
			}
		})
	}
	c.mu.Unlock()
	c.turnMu.Unlock()
	if !written {
		// Send is still at work on it: it stops waiting (for a slot, for
		// its process to start) and ends the turn interrupted. Only Send
		// ends it, so a next turn never starts while this Send still
		// starts a process.
		if cancelWait != nil {
			cancelWait()
		}
		return nil
	}
	if p == nil {
		return nil // its process is gone, and the turn's end with it
	}
	rctx, cancel := context.WithTimeout(ctx, grace)
	defer cancel()
	// Messages given to the turn that have not gone in end with it, as a
	// Stop means (cancel_queued; EventSteerDropped says so).
	if _, err := p.Request(rctx, "interrupt", map[string]any{"cancel_queued": true}); err != nil && !errors.Is(err, ErrProcessExited) {
		c.log.Warn().Err(err).Msg("interrupt request failed")
	}
	return nil
}

// Control sends another control request (set_permission_mode, set_model,
// ...) to the live process. ErrNotRunning if none runs.
func (c *CLI) Control(ctx context.Context, subtype string, body map[string]any) ([]byte, error) {
	c.mu.Lock()
	p := c.proc
	c.mu.Unlock()
	if p == nil {
		return nil, ErrNotRunning
	}
	return p.Request(ctx, subtype, body)
}

// Settings are the session's settings now.
func (c *CLI) Settings() Settings {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.settings
}

// Configure replaces the session's settings. A live process gets a
// changed model, permission mode, thinking budget or effort at once,
// through the CLI's control requests (for its next API request); if the CLI refuses
// one, the settings stay as they were and the CLI's answer is the error.
// The limits (turns, budget) are SetLimits's: Configure keeps them.
func (c *CLI) Configure(ctx context.Context, set Settings) error {
	c.mu.Lock()
	old := c.settings
	set.BudgetUSD, set.MaxTurns = old.BudgetUSD, old.MaxTurns
	c.settings = set
	p := c.proc
	c.mu.Unlock()
	if p == nil {
		return nil
	}
	var err error
	if set.Model != old.Model && set.Model != "" {
		_, err = p.Request(ctx, "set_model", map[string]any{"model": set.Model})
	}
	if err == nil && set.PermissionMode != old.PermissionMode && set.PermissionMode != "" {
		var raw json.RawMessage
		raw, err = p.Request(ctx, "set_permission_mode", map[string]any{"mode": set.PermissionMode})
		if mode := modeInEffect(raw); err == nil && mode != "" && mode != set.PermissionMode && ChoosableMode(mode) {
			// The CLI may put another mode in effect than the one asked
			// for; the session has the one it is in.
			c.log.Info().Str("asked", set.PermissionMode).Str("mode", mode).Msg("the CLI put another permission mode in effect")
			c.mu.Lock()
			if c.settings == set {
				c.settings.PermissionMode = mode
			}
			c.mu.Unlock()
			set.PermissionMode = mode
		}
	}
	if err == nil && set.MaxThinkingTokens != old.MaxThinkingTokens {
		var n any
		if set.MaxThinkingTokens > 0 {
			n = set.MaxThinkingTokens
		}
		_, err = p.Request(ctx, "set_max_thinking_tokens", map[string]any{"max_thinking_tokens": n})
	}
	if err == nil && set.Effort != old.Effort && set.Effort != "" {
		// The CLI has no request of its own for it: its effort setting,
		// merged into the flag settings layer.
		_, err = p.Request(ctx, "apply_flag_settings", map[string]any{"settings": map[string]any{"effortLevel": set.Effort}})
	}
	if err != nil {
		c.mu.Lock()
		if c.settings == set {
			c.settings.Model, c.settings.PermissionMode = old.Model, old.PermissionMode
			c.settings.MaxThinkingTokens, c.settings.Effort = old.MaxThinkingTokens, old.Effort
		}
		c.mu.Unlock()
		return fmt.Errorf("configure claude: %w", err)
	}
	return nil
}

// modeInEffect is the mode of the CLI's answer to set_permission_mode
// ({mode}; "manual" is its other name for "default"), or "" when the
// answer names none (an older CLI answers with no payload).
func modeInEffect(answer json.RawMessage) string {
	var a struct {
		Mode string `json:"mode"`
	}
	if json.Unmarshal(answer, &a) != nil {
		return ""
	}
	if a.Mode == "manual" {
		return "default"
	}
	return a.Mode
}

// ResumeAt makes the next turn continue the conversation from the entry
// with that id, dropping what came after it (--resume-session-at); ""
// starts a fresh conversation. The live process, if any, is stopped.
// ErrBusy while a turn runs.
func (c *CLI) ResumeAt(entry string) error {
	c.mu.Lock()
	if c.running || c.holding {
		c.mu.Unlock()
		return ErrBusy
	}
	p := c.proc
	c.proc = nil
	if entry == "" {
		c.cliSessionID, c.fork = "", false
	}
	c.resumeAt = entry
	c.mu.Unlock()
	if p != nil {
		if err := p.Close(); err != nil {
			c.log.Warn().Err(err).Msg("stop claude to rewind the conversation")
		}
	}
	return nil
}

// SetLimits sets the budget (what the session may still spend, 0: no
// bound) and the agent-turn bound of the next turns, leaving the other
// settings as they are; a live process started with other limits is
// replaced before the next turn.
func (c *CLI) SetLimits(budgetUSD float64, maxTurns int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.settings.BudgetUSD, c.settings.MaxTurns = budgetUSD, maxTurns
}

// RewindResult is the CLI's answer to a rewind of its file checkpoints.
type RewindResult struct {
	CanRewind    bool     `json:"canRewind"`
	Error        string   `json:"error,omitempty"`
	FilesChanged []string `json:"filesChanged,omitempty"`
	Insertions   int      `json:"insertions,omitempty"`
	Deletions    int      `json:"deletions,omitempty"`
}

// RewindFiles restores the files the CLI changed since the person's
// message with messageID to how they were before it, from the CLI's file
// checkpoints (the process needs CLAUDE_CODE_ENABLE_SDK_FILE_CHECKPOINTING);
// with dryRun it only reports the files it would change. With no live
// process one is started, resuming the conversation. ErrBusy while a turn
// runs; a turn cannot start meanwhile.
func (c *CLI) RewindFiles(ctx context.Context, messageID string, dryRun bool) (RewindResult, error) {
	c.mu.Lock()
	switch {
	case c.closed:
		c.mu.Unlock()
		return RewindResult{}, ErrClosed
	case c.running || c.holding:
		c.mu.Unlock()
		return RewindResult{}, ErrBusy
	}
	// No turn starts, and the process is not stopped, while files change.
	c.holding = true
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.holding = false
		c.mu.Unlock()
	}()
	p, err := c.ensureProcess(ctx, false, 0)
	if err != nil {
		return RewindResult{}, err
	}
	raw, err := p.Request(ctx, "rewind_files", map[string]any{"user_message_id": messageID, "dry_run": dryRun})
	if err != nil {
		return RewindResult{}, fmt.Errorf("rewind files: %w", err)
	}
	var res RewindResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return RewindResult{}, fmt.Errorf("rewind files: %w", err)
	}
	return res, nil
}

// SetWaiting marks that the running turn waits for (true) or got (false) an
// answer from the person; the sessions list shows it and the stall
// watchdog holds off meanwhile.
func (c *CLI) SetWaiting(waiting bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if waiting {
		c.waiting++
	} else if c.waiting > 0 {
		c.waiting--
	}
	c.lastOutput = time.Now()
}

// Notice publishes something the person should know to the session's
// clients.
func (c *CLI) Notice(text string) {
	c.publish(Event{Kind: EventNotice, Text: text})
}

// StopIfIdle ends the live process if no turn runs, keeping the session:
// the next turn resumes. It reports whether it stopped one.
func (c *CLI) StopIfIdle() bool { return c.stopIdle() != nil }

// stopIdle is StopIfIdle; it returns the process it stopped, or nil.
func (c *CLI) stopIdle() *Process {
	c.mu.Lock()
	if c.running || c.holding || c.proc == nil {
		c.mu.Unlock()
		return nil
	}
	p := c.proc
	// Detached first, so a turn starting now spawns a fresh process
	// rather than writing to this closing one.
	c.proc = nil
	c.mu.Unlock()
	if err := p.Close(); err != nil {
		c.log.Warn().Err(err).Msg("stop idle claude")
	}
	return p
}

// Close ends the session and its process; it is idempotent.
func (c *CLI) Close() error {
	c.mu.Lock()
	c.closed = true
	p, starting := c.proc, c.spawning
	cancelWait := c.cancelWait
	c.mu.Unlock()
	if cancelWait != nil {
		// A turn waiting for a slot stops waiting.
		cancelWait()
	}
	if starting != nil {
		starting.Kill()
	}
	if p != nil {
		return p.Close()
	}
	return nil
}

func (c *CLI) publish(ev Event) {
	if ev.Time.IsZero() {
		ev.Time = time.Now()
	}
	c.cfg.Sink.Publish(ev)
}
