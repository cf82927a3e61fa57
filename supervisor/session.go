package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"
)

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
	// EventTurnEnd closes a turn, exactly once per EventTurnStart: Msg is
	// the CLI's result, or Err says why the turn ended without one.
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
	Kind        EventKind
	Msg         *Message
	Text        string
	Err         error
	Interrupted bool
	Time        time.Time
	// MessageID is, on EventTurnStart, EventSteered and
	// EventSteerDropped, the id the person's message has in the CLI's
	// conversation (what RewindFiles takes).
	MessageID string
	// Usage is, on EventTurnEnd, what the turn used, when the CLI said.
	Usage *Usage
}

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
}

// CLI runs the claude of one chat session: one long-lived process at a time, one
// turn at a time. A process that died is replaced on the next turn with
// --resume, so the conversation continues.
type CLI struct {
	cfg CLIConfig
	log zerolog.Logger

	mu           sync.Mutex
	proc         *Process
	cliSessionID string
	running      bool
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
func (s *CLI) ID() string { return s.cfg.ID }

// Person is the session's owner.
func (s *CLI) Person() string { return s.cfg.Person }

// CLISessionID is the CLI's id for the conversation ("" before the first turn).
func (s *CLI) CLISessionID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cliSessionID
}

// Resume makes the next process resume the CLI conversation id (one that
// went on elsewhere, in a terminal); "" keeps the current one.
func (s *CLI) Resume(id string) {
	if id == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cliSessionID = id
}

// State reports whether the session is idle, running or waiting.
func (s *CLI) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case !s.running:
		return StateIdle
	case s.waiting > 0:
		return StateWaiting
	default:
		return StateRunning
	}
}

// LastActivity is when a turn last started or ended.
func (s *CLI) LastActivity() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastActivity
}

// Pid is the process id of the live CLI, or 0.
func (s *CLI) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.Pid()
}

// Live reports whether a CLI process is running for this session.
func (s *CLI) Live() bool { return s.Pid() != 0 }

// Send starts a turn with the person's message. It returns once the message
// is with the CLI (or the turn has already ended with an error event); the
// turn's events follow on the Sink. ErrBusy if a turn is running.
func (s *CLI) Send(ctx context.Context, text string) error {
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		return ErrClosed
	case s.running || s.holding:
		s.mu.Unlock()
		return ErrBusy
	}
	s.running = true
	s.interrupting = false
	s.turnSent = false
	s.parts.turns, s.parts.ms, s.parts.apiMS, s.parts.last = 0, 0, 0, nil
	s.turn++
	turn := s.turn
	s.lastActivity = time.Now()
	var stale *Process
	if s.proc != nil && s.limitsChanged() {
		// The CLI fixes its limits at start: a new process, resuming
		// the conversation, runs this turn under the new ones.
		stale, s.proc = s.proc, nil
	}
	needSlot := s.proc == nil && s.cfg.Pool != nil
	fresh := s.cliSessionID == ""
	s.mu.Unlock()
	if stale != nil {
		if err := stale.Close(); err != nil {
			s.log.Warn().Err(err).Msg("stop claude for new limits")
		}
	}

	if s.cfg.Pool != nil {
		s.cfg.Pool.Touch(s.Person())
	}
	// A new conversation starts in a process the warm pool started for
	// it, when there is one.
	if needSlot && fresh && s.fitsWarm() && s.adopt() {
		needSlot = false
	}
	// A turn that needs a process waits for a slot before it starts, so a
	// full server answers "busy" instead of a turn that fails.
	if needSlot {
		if err := s.cfg.Pool.acquire(ctx, s); err != nil {
			s.mu.Lock()
			s.running = false
			s.mu.Unlock()
			return err
		}
	}
	id := uuid.NewString()
	s.publish(Event{Kind: EventTurnStart, Text: text, MessageID: id})
	proc, err := s.ensureProcess(ctx, needSlot)
	if err == nil {
		s.mu.Lock()
		interrupted := s.interrupting && s.turn == turn
		s.mu.Unlock()
		if interrupted {
			s.endTurn(turn, nil, nil, true)
			return nil
		}
		s.touch()
		// A turn of its own: never joined to one the CLI may still be
		// finishing.
		err = proc.SendUser(text, id, PriorityLater)
	}
	if err != nil {
		s.endTurn(turn, nil, fmt.Errorf("start turn: %w", err), false)
		return nil
	}
	s.sendSteers(proc, turn)
	return nil
}

// sendSteers writes the messages given to turn before its own message
// was with the CLI.
func (s *CLI) sendSteers(proc *Process, turn int) {
	s.mu.Lock()
	if s.turn != turn || !s.running {
		s.mu.Unlock()
		return
	}
	s.turnSent = true
	var early []steer
	for i := range s.steers {
		if !s.steers[i].written {
			s.steers[i].written = true
			early = append(early, s.steers[i])
		}
	}
	s.mu.Unlock()
	for _, st := range early {
		if err := proc.SendUser(st.text, st.id, PriorityNext); err != nil {
			s.log.Warn().Err(err).Msg("write a message for the running turn")
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
func (s *CLI) Steer(ctx context.Context, id, text string) error {
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		return ErrClosed
	case !s.running || s.interrupting:
		s.mu.Unlock()
		return ErrNotRunning
	}
	p := s.proc
	if s.turnSent && p == nil {
		// The turn's process is gone; its end is on its way.
		s.mu.Unlock()
		return ErrNotRunning
	}
	st := steer{id: id, text: text, written: s.turnSent}
	s.steers = append(s.steers, st)
	s.mu.Unlock()
	if !st.written {
		return nil // the turn's own message goes first (Send)
	}
	if err := p.SendUser(text, id, PriorityNext); err != nil {
		s.mu.Lock()
		s.steers = slices.DeleteFunc(s.steers, func(x steer) bool { return x.id == id })
		s.mu.Unlock()
		return fmt.Errorf("steer: %w", err)
	}
	return nil
}

// adopt makes a ready process of the warm pool this session's and reports
// whether it did. The process started without --resume: its conversation
// becomes the session's, and its id is recorded from the turn's first
// message like any other.
func (s *CLI) adopt() (ok bool) {
	w := s.cfg.Pool.take(s)
	if w == nil {
		return false
	}
	defer func() {
		if !ok {
			// Nothing of this session's runs in it: its replacement
			// need not wait.
			s.mu.Lock()
			s.adopted = false
			s.mu.Unlock()
			s.cfg.Pool.settled(s.Person())
		}
	}()
	var h Handlers
	if s.cfg.Handlers != nil {
		h = s.cfg.Handlers(s)
	}
	if !w.bind(s, h) {
		// It exited after it was taken; the pool has forgotten it.
		return false
	}
	s.mu.Lock()
	closed := s.closed
	if !closed {
		s.proc = w.proc
		s.adopted = true
	}
	s.mu.Unlock()
	if closed {
		_ = w.proc.Close()
		return false
	}
	select {
	case <-w.proc.Done():
		// It exited before it was ours: onExit did not see it as this
		// session's process.
		s.mu.Lock()
		if s.proc == w.proc {
			s.proc = nil
		}
		s.mu.Unlock()
		return false
	default:
	}
	s.log.Info().Int("pid", w.proc.Pid()).Msg("took a started claude from the warm pool")
	return true
}

// ensureProcess returns the live process, starting (and initializing) one
// when there is none. A resume the CLI cannot do starts a fresh
// conversation, once, and says so.
func (s *CLI) ensureProcess(ctx context.Context, reserved bool) (*Process, error) {
	s.mu.Lock()
	if s.proc != nil {
		p := s.proc
		s.mu.Unlock()
		if reserved {
			s.cfg.Pool.unreserve(s)
		}
		return p, nil
	}
	resume := s.cliSessionID
	s.mu.Unlock()
	if !reserved && s.cfg.Pool != nil {
		if err := s.cfg.Pool.acquire(ctx, s); err != nil {
			return nil, err
		}
	}

	p, err := s.spawn(ctx, resume)
	if err != nil && resume != "" && resumeFailed(err) {
		s.log.Warn().Str("cli_session", resume).Err(err).Msg("resume failed; starting a fresh conversation")
		s.publish(Event{Kind: EventNotice, Text: "The earlier conversation could not be resumed; starting a fresh one."})
		s.mu.Lock()
		s.cliSessionID = ""
		s.mu.Unlock()
		if s.cfg.Pool != nil {
			if err := s.cfg.Pool.acquire(ctx, s); err != nil {
				return nil, err
			}
		}
		p, err = s.spawn(ctx, "")
	}
	return p, err
}

// resumeFailed reports the CLI's answer to a --resume of a conversation it
// does not have. Only that starts a fresh one: any other start-up error
// must not cost the person their history.
func resumeFailed(err error) bool {
	return strings.Contains(err.Error(), "No conversation found")
}

// limitsChanged reports whether the live process was started with other
// limits than the settings ask for now. s.mu is held.
func (s *CLI) limitsChanged() bool {
	if s.settings.MaxTurns != s.procTurns {
		return true
	}
	if s.settings.BudgetUSD <= 0 {
		return s.procCap > 0
	}
	left := s.procCap - s.procCost
	return s.procCap <= 0 || left-s.settings.BudgetUSD > budgetSlack || s.settings.BudgetUSD-left > budgetSlack
}

// budgetSlack is how far a live process's remaining budget may be from
// the session's before the process is replaced: a cent.
const budgetSlack = 0.01

// launchSpec is the Spec a process of this session starts with now: the
// configured one with the session's settings, and for a resume the fork
// or rewind still to take.
func (s *CLI) launchSpec(resume string) Spec {
	spec := s.cfg.Spec
	s.mu.Lock()
	set := s.settings
	if resume != "" {
		spec.ForkSession, spec.ResumeAt = s.fork, s.resumeAt
	}
	s.mu.Unlock()
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
func (s *CLI) fitsWarm() bool {
	return slices.Equal(s.launchSpec("").Args(""), s.cfg.Spec.Args(""))
}

func (s *CLI) spawn(ctx context.Context, resume string) (*Process, error) {
	spec := s.launchSpec(resume)
	var h Handlers
	if s.cfg.Handlers != nil {
		h = s.cfg.Handlers(s)
	}
	var p *Process
	ready := make(chan struct{})
	var err error
	cred := spec.credential(s.cfg.ID)
	argv := spec.Command(resume)
	p, err = StartProcess(ProcessConfig{
		Path:     argv[0],
		Args:     argv[1:],
		Dir:      s.cfg.Dir,
		Env:      spec.env(cred),
		Handlers: h,
		OnMessage: func(m *Message) {
			<-ready
			s.onMessage(p, m)
		},
		OnExit: func(err error) {
			<-ready
			cred.revoke()
			if s.cfg.Pool != nil {
				s.cfg.Pool.exited(p)
			}
			s.onExit(p, err)
		},
		Grace:  spec.grace(),
		Logger: s.log,
	})
	if err != nil {
		cred.revoke()
		if s.cfg.Pool != nil {
			s.cfg.Pool.unreserve(s)
		}
		return nil, err
	}
	if s.cfg.Pool != nil {
		s.cfg.Pool.started(p, s)
	}
	s.mu.Lock()
	closed := s.closed
	s.spawning = p
	s.mu.Unlock()
	close(ready)
	if closed {
		_ = p.Close()
		return nil, ErrClosed
	}
	s.log.Info().Int("pid", p.Pid()).Str("resume", resume).Msg("claude process started")

	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), spec.initTimeout())
	defer cancel()
	_, err = p.Request(ictx, "initialize", spec.initializeBody())
	s.mu.Lock()
	s.spawning = nil
	if err == nil && s.closed {
		err = ErrClosed
	}
	if err == nil {
		s.proc = p
		s.procCap, s.procTurns, s.procCost, s.procUsage = spec.MaxBudgetUSD, spec.MaxTurns, 0, nil
		s.pendingFork, s.pendingResumeAt = spec.ForkSession, spec.ResumeAt
	}
	s.mu.Unlock()
	if err != nil {
		p.Kill()
		_ = p.Close()
		if r := s.cfg.Pool.noteRefusal(s.Person(), p, s.log); r != nil {
			return nil, fmt.Errorf("start claude: %w", r)
		}
		if errors.Is(err, ErrProcessExited) {
			return nil, fmt.Errorf("initialize: %w", p.Err())
		}
		return nil, fmt.Errorf("initialize: %w", err)
	}
	s.cfg.Pool.noteStarted(s.Person())
	return p, nil
}

func (s *CLI) onMessage(p *Process, m *Message) {
	s.mu.Lock()
	if s.proc != p {
		// Before initialize is answered the CLI only writes on its way out
		// (a failed --resume ends with an error result): that belongs to
		// the start-up error, not to the turn.
		starting := s.spawning == p
		s.mu.Unlock()
		if starting {
			s.log.Debug().Str("type", m.Type).Str("subtype", m.Subtype).Msg("cli output during start-up")
		}
		return
	}
	if m.SessionID != "" && (m.Type == "result" || (m.Type == "system" && m.Subtype == "init")) {
		s.cliSessionID = m.SessionID
	}
	if m.Type == "system" && m.PermissionMode != "" && s.settings.PermissionMode != "" {
		// The CLI changes its mode itself (an approved plan ends plan
		// mode); the next process starts in the mode it is in now.
		s.settings.PermissionMode = m.PermissionMode
	}
	// The turn's first output: the replacement of the waiting process it
	// took may start now.
	settle := s.adopted && (m.Type == "assistant" || m.Type == "result" ||
		(m.Type == "stream_event" && m.Event != nil && m.Event.Type == "content_block_delta"))
	if settle {
		s.adopted = false
	}
	var steered []steer
	if m.Type == "command_lifecycle" && (m.State == "started" || m.State == "cancelled") {
		// A message given to the turn went in, or was withdrawn.
		for i, st := range s.steers {
			if st.id == m.CommandUUID {
				steered = append(steered, st)
				s.steers = slices.Delete(s.steers, i, i+1)
				break
			}
		}
		if m.State == "started" {
			s.parts.last = nil
		}
	}
	// A result with messages given to the turn still to go in is not the
	// turn's end: the CLI runs them now, as the turn's next part.
	goesOn := m.Type == "result" && s.running && !s.interrupting && len(s.steers) > 0
	end := m
	if goesOn {
		s.parts.turns += m.NumTurns
		s.parts.ms += m.DurationMS
		s.parts.apiMS += m.DurationAPIMS
		s.parts.last = m
	}
	if m.Type == "command_lifecycle" && m.State == "cancelled" && len(steered) > 0 && len(s.steers) == 0 && s.parts.last != nil {
		// What the turn went on for was withdrawn before it ran: the
		// result it went past ends it after all.
		end = s.parts.last
		s.parts.turns -= end.NumTurns
		s.parts.ms -= end.DurationMS
		s.parts.apiMS -= end.DurationAPIMS
	}
	var usage *Usage
	ends := end.Type == "result" && !goesOn
	if ends {
		usage = s.turnUsage(end)
		if !end.IsError {
			// The conversation the process was started on is now on
			// disk: a later resume continues it as it is.
			if s.pendingFork {
				s.fork, s.pendingFork = false, false
			}
			if s.pendingResumeAt != "" && s.resumeAt == s.pendingResumeAt {
				s.resumeAt, s.pendingResumeAt = "", ""
			}
		}
	}
	turn, running := s.turn, s.running
	interrupted := s.interrupting
	s.mu.Unlock()
	s.touch()
	if settle {
		s.cfg.Pool.settled(s.Person())
	}

	s.publish(Event{Kind: EventCLI, Msg: m})
	for _, st := range steered {
		kind := EventSteered
		if m.State == "cancelled" {
			kind = EventSteerDropped
		}
		s.publish(Event{Kind: kind, Text: st.text, MessageID: st.id})
	}
	if ends && running {
		s.endTurnUsage(turn, end, nil, interrupted || end.TerminalReason == "aborted_streaming", usage)
	}
}

// turnUsage is what the turn that m (a result) ends used: the CLI's
// totals count from the process's start, so the turn's share is the
// difference from the previous result. s.mu is held.
func (s *CLI) turnUsage(m *Message) *Usage {
	if m.TotalCostUSD == nil && m.ModelUsage == nil {
		return nil
	}
	u := &Usage{NumTurns: m.NumTurns + s.parts.turns, DurationMS: m.DurationMS + s.parts.ms, APIDurationMS: m.DurationAPIMS + s.parts.apiMS}
	if m.TotalCostUSD != nil {
		u.CostUSD = max(*m.TotalCostUSD-s.procCost, 0)
		s.procCost = *m.TotalCostUSD
	}
	for name, total := range m.ModelUsage {
		prev := s.procUsage[name]
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
		s.procUsage = m.ModelUsage
	}
	return u
}

func (s *CLI) onExit(p *Process, err error) {
	s.mu.Lock()
	if s.proc != p {
		s.mu.Unlock()
		return
	}
	s.proc = nil
	turn, running, closed := s.turn, s.running, s.closed
	interrupting := s.interrupting
	s.mu.Unlock()
	if !running {
		if err != nil {
			s.log.Warn().Err(err).Msg("claude exited between turns; the next turn resumes")
		}
		return
	}
	switch {
	case closed:
		err = ErrClosed
	case err == nil:
		err = ErrProcessExited
	}
	s.endTurn(turn, nil, err, interrupting)
}

// endTurn closes turn once: a later call for the same turn does nothing.
func (s *CLI) endTurn(turn int, result *Message, err error, interrupted bool) {
	s.endTurnUsage(turn, result, err, interrupted, nil)
}

func (s *CLI) endTurnUsage(turn int, result *Message, err error, interrupted bool, usage *Usage) {
	s.mu.Lock()
	if !s.running || s.turn != turn {
		s.mu.Unlock()
		return
	}
	s.running = false
	s.waiting = 0
	s.interrupting = false
	s.lastActivity = time.Now()
	stopTimer(&s.stallTimer)
	stopTimer(&s.killTimer)
	dropped := s.steers
	s.steers = nil
	settle := s.adopted
	s.adopted = false
	s.mu.Unlock()
	if settle {
		s.cfg.Pool.settled(s.Person())
	}
	if err != nil {
		s.log.Warn().Err(err).Msg("turn ended with an error")
	}
	for _, st := range dropped {
		s.publish(Event{Kind: EventSteerDropped, Text: st.text, MessageID: st.id})
	}
	s.publish(Event{Kind: EventTurnEnd, Msg: result, Err: err, Interrupted: interrupted, Usage: usage})
	if s.cfg.Pool != nil {
		s.cfg.Pool.idle()
	}
}

func stopTimer(t **time.Timer) {
	if *t != nil {
		(*t).Stop()
		*t = nil
	}
}

// touch records output from the CLI and re-arms the stall watchdog.
func (s *CLI) touch() {
	if s.cfg.StallTimeout <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastOutput = time.Now()
	if !s.running {
		return
	}
	if s.stallTimer == nil {
		turn := s.turn
		s.stallTimer = time.AfterFunc(s.cfg.StallTimeout, func() { s.checkStall(turn) })
	}
}

func (s *CLI) checkStall(turn int) {
	s.mu.Lock()
	s.stallTimer = nil
	if !s.running || s.turn != turn || s.proc == nil {
		s.mu.Unlock()
		return
	}
	idle := time.Since(s.lastOutput)
	if s.waiting > 0 || idle < s.cfg.StallTimeout {
		// Waiting for the person is not a stall; output came in meanwhile.
		s.stallTimer = time.AfterFunc(max(s.cfg.StallTimeout-idle, time.Second), func() { s.checkStall(turn) })
		s.mu.Unlock()
		return
	}
	p := s.proc
	// Detached before the turn ends, so the next turn starts a fresh
	// process instead of writing to this dying one.
	s.proc = nil
	s.mu.Unlock()
	s.log.Warn().Dur("silent", idle).Int("pid", p.Pid()).Msg("claude stalled; killing it")
	p.Kill()
	// The process's own reaper collects it; Wait also closes its stdin.
	s.endTurn(turn, nil, fmt.Errorf("%w (%s)", ErrStalled, idle.Round(time.Second)), false)
}

// Interrupt stops the running turn in-band; the turn ends with its result.
// If the CLI does not end the turn within grace, the process is killed and
// the turn ends with an error, so an interrupt never hangs.
func (s *CLI) Interrupt(ctx context.Context) error {
	s.mu.Lock()
	if !s.running {
		s.mu.Unlock()
		return ErrNotRunning
	}
	s.interrupting = true
	turn := s.turn
	p := s.proc
	grace := s.cfg.Spec.grace()
	if s.killTimer == nil && p != nil {
		s.killTimer = time.AfterFunc(grace, func() {
			s.mu.Lock()
			still := s.running && s.turn == turn
			s.killTimer = nil
			s.mu.Unlock()
			if still {
				s.log.Warn().Msg("interrupt did not end the turn; killing claude")
				p.Kill()
			}
		})
	}
	s.mu.Unlock()
	if p == nil {
		return nil // still starting: Send sees the flag and ends the turn
	}
	rctx, cancel := context.WithTimeout(ctx, grace)
	defer cancel()
	// Messages given to the turn that have not gone in end with it, as a
	// Stop means (cancel_queued; EventSteerDropped says so).
	if _, err := p.Request(rctx, "interrupt", map[string]any{"cancel_queued": true}); err != nil && !errors.Is(err, ErrProcessExited) {
		s.log.Warn().Err(err).Msg("interrupt request failed")
	}
	return nil
}

// Control sends another control request (set_permission_mode, set_model,
// ...) to the live process. ErrNotRunning if none runs.
func (s *CLI) Control(ctx context.Context, subtype string, body map[string]any) ([]byte, error) {
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p == nil {
		return nil, ErrNotRunning
	}
	return p.Request(ctx, subtype, body)
}

// Settings are the session's settings now.
func (s *CLI) Settings() Settings {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.settings
}

// Configure replaces the session's settings. A live process gets a
// changed model, permission mode, thinking budget or effort at once,
// through the CLI's control requests (for its next API request); if the CLI refuses
// one, the settings stay as they were and the CLI's answer is the error.
// The limits (turns, budget) are SetLimits's: Configure keeps them.
func (s *CLI) Configure(ctx context.Context, set Settings) error {
	s.mu.Lock()
	old := s.settings
	set.BudgetUSD, set.MaxTurns = old.BudgetUSD, old.MaxTurns
	s.settings = set
	p := s.proc
	s.mu.Unlock()
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
		if mode := modeInEffect(raw); err == nil && mode != "" && mode != set.PermissionMode {
			// The CLI may put another mode in effect than the one asked
			// for; the session has the one it is in.
			s.log.Info().Str("asked", set.PermissionMode).Str("mode", mode).Msg("the CLI put another permission mode in effect")
			s.mu.Lock()
			if s.settings == set {
				s.settings.PermissionMode = mode
			}
			s.mu.Unlock()
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
		s.mu.Lock()
		if s.settings == set {
			s.settings.Model, s.settings.PermissionMode = old.Model, old.PermissionMode
			s.settings.MaxThinkingTokens, s.settings.Effort = old.MaxThinkingTokens, old.Effort
		}
		s.mu.Unlock()
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
func (s *CLI) ResumeAt(entry string) error {
	s.mu.Lock()
	if s.running || s.holding {
		s.mu.Unlock()
		return ErrBusy
	}
	p := s.proc
	s.proc = nil
	if entry == "" {
		s.cliSessionID, s.fork = "", false
	}
	s.resumeAt = entry
	s.mu.Unlock()
	if p != nil {
		if err := p.Close(); err != nil {
			s.log.Warn().Err(err).Msg("stop claude to rewind the conversation")
		}
	}
	return nil
}

// SetLimits sets the budget (what the session may still spend, 0: no
// bound) and the agent-turn bound of the next turns, leaving the other
// settings as they are; a live process started with other limits is
// replaced before the next turn.
func (s *CLI) SetLimits(budgetUSD float64, maxTurns int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settings.BudgetUSD, s.settings.MaxTurns = budgetUSD, maxTurns
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
func (s *CLI) RewindFiles(ctx context.Context, messageID string, dryRun bool) (RewindResult, error) {
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		return RewindResult{}, ErrClosed
	case s.running || s.holding:
		s.mu.Unlock()
		return RewindResult{}, ErrBusy
	}
	// No turn starts, and the process is not stopped, while files change.
	s.holding = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.holding = false
		s.mu.Unlock()
	}()
	p, err := s.ensureProcess(ctx, false)
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
func (s *CLI) SetWaiting(waiting bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if waiting {
		s.waiting++
	} else if s.waiting > 0 {
		s.waiting--
	}
	s.lastOutput = time.Now()
}

// Notice publishes something the person should know to the session's
// clients.
func (s *CLI) Notice(text string) {
	s.publish(Event{Kind: EventNotice, Text: text})
}

// StopIfIdle ends the live process if no turn runs, keeping the session:
// the next turn resumes. It reports whether it stopped one.
func (s *CLI) StopIfIdle() bool { return s.stopIdle() != nil }

// stopIdle is StopIfIdle; it returns the process it stopped, or nil.
func (s *CLI) stopIdle() *Process {
	s.mu.Lock()
	if s.running || s.holding || s.proc == nil {
		s.mu.Unlock()
		return nil
	}
	p := s.proc
	// Detached first, so a turn starting now spawns a fresh process
	// rather than writing to this closing one.
	s.proc = nil
	s.mu.Unlock()
	if err := p.Close(); err != nil {
		s.log.Warn().Err(err).Msg("stop idle claude")
	}
	return p
}

// Close ends the session and its process; it is idempotent.
func (s *CLI) Close() error {
	s.mu.Lock()
	s.closed = true
	p, starting := s.proc, s.spawning
	s.mu.Unlock()
	if starting != nil {
		starting.Kill()
	}
	if p != nil {
		return p.Close()
	}
	return nil
}

func (s *CLI) publish(ev Event) {
	if ev.Time.IsZero() {
		ev.Time = time.Now()
	}
	s.cfg.Sink.Publish(ev)
}
