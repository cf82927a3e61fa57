package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/majorhq/major/attachments"
	"github.com/majorhq/major/clientevent"
	"github.com/majorhq/major/sessionstore"
	"github.com/majorhq/major/supervisor"
	"github.com/majorhq/major/usage"
)

// ErrNotFound is returned for a session that does not exist or belongs to
// another person; the two are not told apart, so ids leak nothing.
var ErrNotFound = errors.New("session not found")

// ErrTooManySessions is returned instead of a new session when the person
// already keeps as many as one person may.
var ErrTooManySessions = errors.New("you have as many chats as one person may keep; clear old ones and try again")

// ChatMessage is one entry of a session's history.
type ChatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// SessionInfo describes a session in the sessions list.
type SessionInfo struct {
	ID           string    `json:"id"`
	Title        string    `json:"title"`
	Created      time.Time `json:"created"`
	LastActivity time.Time `json:"last_activity"`
	State        string    `json:"state"`
	// Queued is how many messages wait for the running turn.
	Queued int `json:"queued"`
	// Model and PermissionMode are what the next turn runs with, as far
	// as known (the CLI reports its default model at a turn's start);
	// MaxThinkingTokens is the thinking budget (0: the CLI's default).
	Model             string `json:"model,omitempty"`
	PermissionMode    string `json:"permission_mode,omitempty"`
	MaxThinkingTokens int    `json:"max_thinking_tokens,omitempty"`
	// Effort is the effort level of adaptive thinking ("": the default).
	Effort string `json:"effort,omitempty"`
	// SpentUSD is what the session's turns have cost so far.
	SpentUSD float64 `json:"spent_usd"`
	// ForkedFrom is the session this one was forked from.
	ForkedFrom string `json:"forked_from,omitempty"`
	// ModelName is the model in effect by the name a person reads
	// (ModelName): the one chosen, else the one the CLI last reported;
	// "" before either is known (the CLI's default model).
	ModelName string `json:"model_name,omitempty"`
	// Pinned chats come first in the list.
	Pinned bool `json:"pinned,omitempty"`
	// Match is, in search results, the text around what matched.
	Match string `json:"match,omitempty"`
}

// SessionParams is what a Launcher needs to start a supervisor session.
type SessionParams struct {
	ID           string
	Person       string
	CLISessionID string
	// Fork: the first resume of CLISessionID continues as a new
	// conversation; ResumeAt: it keeps the conversation only up to that
	// entry (see supervisor.CLIConfig).
	Fork     bool
	ResumeAt string
	// Settings are the session's model, permission mode and thinking
	// budget as chosen so far (zero: the launcher's defaults).
	Settings supervisor.Settings
	Sink     supervisor.Sink
	// Session is the relay side of the session, for questions and
	// permissions that wait for a client.
	Chat *Session
}

// Launcher builds the CLI of a chat (a supervisor session): the CLI spec
// for the person, the control handlers. assembly.Launcher provides it.
type Launcher interface {
	Launch(p SessionParams) CLI
}

// LauncherFunc adapts a function to Launcher.
type LauncherFunc func(SessionParams) CLI

// Launch calls f.
func (f LauncherFunc) Launch(p SessionParams) CLI { return f(p) }

// TurnObserver follows every session's turns as their events arrive
// (package tracing makes a trace of each turn). It is called with the
// session's lock held: it must not block or call the session.
type TurnObserver interface {
	// Observe sees ev of session's turn; accepted is, on a turn's start,
	// when its message was accepted (it may have waited in the queue).
	Observe(session, person string, accepted time.Time, ev supervisor.Event)
}

// RegistryConfig configures a Registry.
type RegistryConfig struct {
	Launcher Launcher
	// Turns, when set, observes every turn's events.
	Turns TurnObserver
	// Store keeps sessions across restarts; nil keeps them in memory only.
	Store *sessionstore.Store
	// EvictAfter is how long an idle session (no client attached, no
	// turn running or waiting) keeps its events in memory, at least;
	// they leave it within twice that, and are read from Store again when
	// needed. Default DefaultEvictAfter; negative keeps them. Only with a
	// Store.
	EvictAfter time.Duration
	// MaxLogBytes is the size past which a session's log is compacted
	// (see compactIfDueLocked); default DefaultMaxLogBytes.
	MaxLogBytes int64
	// TTL expires sessions idle for longer, at start-up and whenever
	// Expire runs; 0 keeps them forever.
	TTL time.Duration
	// LiveProcesses reports live CLI processes for the metrics, and
	// WaitingProcesses those of them ready for a new chat.
	LiveProcesses    func() int
	WaitingProcesses func() int
	// Active, when set, is told of a person who lists their sessions or
	// opens a new one: their client is open and a message may follow.
	Active func(person string)
	// MaxPerPerson bounds the sessions one person keeps (each is state on
	// disk); 0 means no limit.
	MaxPerPerson int
	// TurnEnd, when set, runs after every turn of a session and before
	// the turn's terminal event is published: a status it returns is
	// published in the turn, ahead of done or error, so the turn's
	// clients see it. The session's later events wait behind it. It is
	// given TurnEndTimeout (default 1m).
	TurnEnd        func(ctx context.Context, person, sessionID string) (status string)
	TurnEndTimeout time.Duration
	// QueueLimit bounds the messages waiting in one session; default
	// DefaultQueueLimit.
	QueueLimit int
	// VetRewind checks the files a rewind of person's session would
	// change (as the CLI names them) and returns them as the person sees
	// them; an error refuses the rewind. nil: files are never rewound.
	VetRewind func(person string, files []string) ([]string, error)
	// Rewinding, when set, runs just before a rewind restores files: until
	// release, nothing else may change the person's work tree (the
	// vault's git sync waits); an error refuses the rewind.
	Rewinding func(ctx context.Context, person, sessionID string) (release func(), err error)
	// Rewound, when set, runs after a rewind restored files (to commit
	// them); what it returns is the rewind's status for the person.
	Rewound func(ctx context.Context, person, sessionID, messageID string) (status string)
	// Commits, when set, reads the commits turn ends make, for what each
	// turn changed (changes.go).
	Commits Commits
	// Wrote, when set, is told of a turn whose message carried files the
	// server saved in the person's folder: its end must commit them
	// even if no tool of the turn ran.
	Wrote func(sessionID string)
	// Limits are each person's budgets and turn bound; nil: none.
	Limits func(person string) Limits
	// Notifier hears of what waits for a person, of turns that end and
	// of refused messages (package notify); nil: no one is told.
	Notifier Notifier
	// Metered says that every model request's cost reaches the registry
	// as it ends (Charge, from the model gateway), a turn's cut off by a
	// crash included: what a session and a person spent is then the sum
	// of those, and a turn's end adds only the message, its agent turns
	// and its time to the person's day. Without it, the CLI's figures at
	// each turn's end are what was spent.
	Metered bool
	// ServerPaths are the server's folders, which no client may see:
	// every event, history and error text of a person's sessions shows
	// paths in the person's folder relative to it and hides the others.
	// Empty: no path is hidden (tests that run no CLI).
	ServerPaths clientevent.ServerPaths
	Logger      zerolog.Logger
	Now         func() time.Time
}

// Registry holds every chat session by id.
type Registry struct {
	cfg     RegistryConfig
	log     zerolog.Logger
	metrics *Metrics
	ledger  *usage.Ledger

	// ctx ends the starts of queued turns when the registry closes;
	// starts is those in flight.
	ctx    context.Context
	stop   context.CancelFunc
	starts sync.WaitGroup
	// sweeps is the goroutine that tidies sessions and evicts idle ones.
	sweeps sync.WaitGroup

	mu       sync.Mutex
	byID     map[string]*Session
	creating map[string]int // person → sessions being created
	// away is the persons released to move to another server: none of
	// their sessions is created until they are adopted again.
	away     map[string]bool
	shutdown bool
	// redactors is each person's Redactor, built once (it resolves
	// symbolic links, so not under mu).
	redactMu  sync.Mutex
	redactors map[string]*clientevent.Redactor
	// endings are the turn-end hooks running; Close stops new ones
	// (closing) and waits for them.
	endMu   sync.Mutex
	closing bool
	endings sync.WaitGroup
}

// NewRegistry returns a registry, with the sessions the store kept.
func NewRegistry(cfg RegistryConfig) (*Registry, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.TurnEndTimeout <= 0 {
		cfg.TurnEndTimeout = time.Minute
	}
	if cfg.QueueLimit <= 0 {
		cfg.QueueLimit = DefaultQueueLimit
	}
	if cfg.EvictAfter == 0 {
		cfg.EvictAfter = DefaultEvictAfter
	}
	if cfg.MaxLogBytes <= 0 {
		cfg.MaxLogBytes = DefaultMaxLogBytes
	}
	s := &Registry{cfg: cfg, log: cfg.Logger, byID: make(map[string]*Session), creating: map[string]int{}, metrics: newMetrics(),
		redactors: map[string]*clientevent.Redactor{}}
	s.ctx, s.stop = context.WithCancel(context.Background())
	s.metrics.live = cfg.LiveProcesses
	s.metrics.waiting = cfg.WaitingProcesses
	s.metrics.sessions = s.counts
	if cfg.Store == nil {
		s.ledger = usage.Open("", cfg.Logger)
		return s, nil
	}
	s.ledger = usage.Open(cfg.Store.Dir(), cfg.Logger)
	loaded, err := loadSessions(cfg.Store, s.log)
	if err != nil {
		s.stop()
		s.ledger.Close()
		return nil, fmt.Errorf("load sessions: %w", err)
	}
	for _, l := range expire(cfg.Store, s.log, loaded, cfg.TTL, cfg.Now()) {
		l.events = readEvents(cfg.Store, s.log, l.meta.Person, l.meta.ID, s.redactor(l.meta.Person))
		if err := s.restore(l); err != nil {
			s.log.Warn().Err(err).Str("session", l.meta.ID).Msg("could not restore session")
		}
	}
	if n := len(s.byID); n > 0 {
		s.log.Info().Int("sessions", n).Msg("sessions restored")
		// Each log was read whole and let go: give that memory back to
		// the system now rather than over the next minutes.
		debug.FreeOSMemory()
	}
	s.startSweeps()
	return s, nil
}

// Session is one chat session as the relay sees it: its CLI (relay.CLI),
// its event stream, its history and title.
type Session struct {
	ID      string
	Person  string
	Created time.Time

	cli     CLI
	stream  *Stream
	redact  *clientevent.Redactor
	store   *sessionstore.Store
	elog    *sessionstore.Log
	maxLog  int64 // compact the log past this size
	log     zerolog.Logger
	metrics *Metrics
	turns   TurnObserver
	// ending counts the turn ends whose work (commit, changes) runs.
	ending atomic.Int32

	mu    sync.Mutex
	tr    *clientevent.Translator
	title string
	// hist is the compat history, kept from the events as they are
	// published; nil while the events are not in memory (History builds
	// it again).
	hist *chatHistory
	// hold keeps back the end of the text streamed so far that may be
	// the start of a server path, until the next delta.
	hold         *clientevent.TextHold
	lastActivity time.Time
	turnStarted  time.Time
	interactive  int
	asks         *asks
	// model and mode are the model and permission mode the CLI last
	// reported running with.
	model string
	mode  string
	// fork, resumeAt: what the next process starts with (see
	// SessionParams), until a turn of it has completed.
	fork       bool
	resumeAt   string
	forkedFrom string
	// ledger sums the person's usage per day.
	ledger *usage.Ledger
	// meteredMode: the gateway reports each request's cost (Charge), and
	// metered is the sum, what the session spent.
	meteredMode bool
	metered     float64
	// answerHead is the start of the running (or last) turn's answer,
	// at most about answerHeadBytes: what a notification of its end
	// shows, whether or not the history is in memory.
	answerHead strings.Builder
	// refused is the budget a model request of the running turn was
	// refused for, by the gateway; the turn ends with it.
	refused *BudgetError
	// setMu makes one settings change at a time, so none is lost.
	setMu sync.Mutex
	// terminal: the conversation is open in a terminal (see terminal.go).
	terminal bool
	// stopping: the server shuts down; a turn it ends says so.
	stopping bool
	// pinned: the person pinned the chat on top of their list.
	pinned bool
	// imported is a conversation imported when the session was made
	// (attached.go); lastCommit the session's newest commit known, so a
	// turn's end tells its own (changes.go).
	imported   []attachments.HistoryEntry
	lastCommit string
	// onTurnEnd starts the turn-end hook for a turn-end event and reports
	// whether it did (nil: there is none). While it runs, the session's
	// events wait in held, in order: the CLI's, and those a request of
	// the CLI made meanwhile (publishInOrderLocked).
	onTurnEnd func(end supervisor.Event) bool
	held      heldEvents
	// cliTurn is the CLI's turn as its events arrive (the turn rule,
	// turns.go); cliTurns counts the turns started on the CLI, as they
	// arrive; endedTurns the turn ends published. A question belongs to
	// the turn the CLI was running when it asked (ask.turn).
	cliTurn              cliTurn
	cliTurns, endedTurns int
	// shownTurns counts the turn starts published; cutTurn is the
	// stream's turn whose output passed its bound (bounds.go), 0: none.
	shownTurns, cutTurn int
	// compactedTo is the turn up to which the log's cli events were
	// last asked to go (compactIfDueLocked).
	compactedTo int

	drafts drafts
	// notify hears of what may need the person (never nil).
	notify Notifier
	// policy is the permission policy the CLI's requests are answered
	// with (CanUseTool), for the drafts' view of the turn.
	policy atomic.Pointer[AskPolicy]
	queue  turnQueue
	// steers are the messages given to the running turn (see steer.go).
	steers []*Ticket
	// ctx bounds the starts of this chat's turns; dispatch starts one.
	ctx      context.Context
	cancel   context.CancelFunc
	dispatch func(*Ticket)
}

// CLI is the chat's CLI.
func (c *Session) CLI() CLI { return c.cli }

// Stream is the session's event log.
func (c *Session) Stream() *Stream { return c.stream }

// persistLocked queues the index entry and, for a log grown too big, its
// compaction, for the log writer. c.mu is held; the disk is not touched.
func (c *Session) persistLocked() {
	if c.elog != nil {
		c.elog.SaveIndex(c.metaLocked())
	}
	c.compactIfDueLocked()
}

// metaLocked is the session's index entry. c.mu is held.
func (c *Session) metaLocked() meta {
	set := c.cli.Settings()
	return meta{ID: c.ID, Person: c.Person, CLISessionID: c.cli.CLISessionID(), Title: c.title,
		Created: c.Created, LastActivity: c.lastActivity,
		Model: set.Model, PermissionMode: set.PermissionMode, MaxThinkingTokens: set.MaxThinkingTokens,
		Effort: set.Effort, SpentUSD: c.spentLocked(), Fork: c.fork, ResumeAt: c.resumeAt, ForkedFrom: c.forkedFrom, LastEntry: c.tr.LastEntry(),
		Pinned: c.pinned}
}

// ClientText is text as the session's clients may read it: without the
// server's paths.
func (c *Session) ClientText(text string) string { return c.redact.Text(text) }

// Info describes the session for the sessions list.
func (c *Session) Info() SessionInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	set := c.cli.Settings()
	model := set.Model
	if model == "" {
		model = c.model
	}
	// A turn the relay still holds (its start not yet begun, or its end
	// hook still committing) is running, though its CLI may be idle: the
	// session takes no terminal nor rewind until it is done.
	state := c.cli.State()
	if state == supervisor.StateIdle && (c.queue.current != nil || c.held.waiting()) {
		state = supervisor.StateRunning
	}
	return SessionInfo{ID: c.ID, Title: c.redact.Text(c.title), Created: c.Created, LastActivity: c.lastActivity, State: string(state),
		Queued: len(c.queue.waiting), Model: model, PermissionMode: set.PermissionMode, MaxThinkingTokens: set.MaxThinkingTokens,
		Effort: set.Effort, SpentUSD: c.spentLocked(), ForkedFrom: c.forkedFrom, ModelName: clientevent.ModelName(model), Pinned: c.pinned}
}

// AttachInteractive counts a client that can answer questions until the
// returned func is called.
func (c *Session) AttachInteractive() (detach func()) {
	c.mu.Lock()
	c.interactive++
	c.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			c.interactive--
			c.mu.Unlock()
		})
	}
}

// Interactive reports whether a client that can answer is attached.
func (c *Session) Interactive() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.interactive > 0
}

// GetOrCreate returns the person's session with id, or a new session when
// id is empty, unknown or another person's: a person never continues
// someone else's session. ErrTooManySessions if a new one would be more
// than the person may keep.
func (r *Registry) GetOrCreate(id, person string) (*Session, error) {
	if c, err := r.Get(id, person); err == nil {
		return c, nil
	}
	return r.create(person)
}

// reserve counts a session of person's being created, unless they keep
// as many as one may; unreserve ends that.
func (r *Registry) reserve(person string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.away[person] {
		return ErrMoving
	}
	n := r.creating[person]
	for _, c := range r.byID {
		if c.Person == person {
			n++
		}
	}
	if r.cfg.MaxPerPerson > 0 && n >= r.cfg.MaxPerPerson {
		return fmt.Errorf("%w (at most %d)", ErrTooManySessions, r.cfg.MaxPerPerson)
	}
	r.creating[person]++
	return nil
}

func (r *Registry) unreserve(person string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.creating[person]--; r.creating[person] <= 0 {
		delete(r.creating, person)
	}
}

func (r *Registry) create(person string) (*Session, error) {
	r.active(person)
	if err := r.reserve(person); err != nil {
		return nil, err
	}
	defer r.unreserve(person)

	now := r.cfg.Now()
	c, err := r.open(meta{ID: uuid.NewString(), Person: person, Created: now, LastActivity: now}, nil)
	if err != nil {
		// The disk failed: the session still works, in memory.
		r.log.Error().Err(err).Msg("session state not persisted")
	}
	r.log.Info().Str("session", c.ID).Str("person", person).Msg("session created")
	return c, nil
}

// open builds a Session for m with the events already logged, and registers it.
func (r *Registry) open(m meta, events []*Event) (*Session, error) {
	c := &Session{
		ID: m.ID, Person: m.Person, Created: m.Created,
		tr:           clientevent.NewTranslator(m.ID),
		store:        r.cfg.Store,
		maxLog:       r.cfg.MaxLogBytes,
		lastActivity: m.LastActivity,
		asks:         newAsks(),
		log:          r.log.With().Str("session", m.ID).Logger(),
		metrics:      r.metrics,
		turns:        r.cfg.Turns,
		queue:        turnQueue{limit: r.cfg.QueueLimit},
		ledger:       r.ledger,
		meteredMode:  r.cfg.Metered,
		metered:      m.SpentUSD,
		model:        m.Model,
		fork:         m.Fork,
		resumeAt:     m.ResumeAt,
		forkedFrom:   m.ForkedFrom,
		pinned:       m.Pinned,
		notify:       r.cfg.Notifier,
	}
	if c.notify == nil {
		c.notify = noNotifier{}
	}
	c.tr.Restore(m.SpentUSD, m.LastEntry)
	if hook := r.cfg.TurnEnd; hook != nil {
		run := func() turnEnding {
			ctx, cancel := context.WithTimeout(context.Background(), r.cfg.TurnEndTimeout)
			defer cancel()
			status := hook(ctx, m.Person, m.ID)
			return turnEnding{status: status, changes: r.turnChanges(ctx, c)}
		}
		c.onTurnEnd = func(end supervisor.Event) bool {
			r.endMu.Lock()
			defer r.endMu.Unlock()
			if r.closing {
				return false
			}
			r.endings.Add(1)
			c.ending.Add(1)
			go func() {
				defer r.endings.Done()
				defer c.ending.Add(-1)
				c.finishTurn(end, run)
			}()
			return true
		}
	}
	c.ctx, c.cancel = context.WithCancel(r.ctx)
	c.dispatch = func(t *Ticket) { r.dispatch(c, t) }
	var err error
	if r.cfg.Store != nil {
		// The first index entry is saved before the session is used (a
		// new session is not yet anyone's hot path); later ones are
		// queued for the log writer.
		if c.elog, err = r.cfg.Store.Open(m.Person, m.ID); err == nil {
			err = r.cfg.Store.SaveIndex(m.Person, m.ID, m)
		}
	}
	var onNew func(*Event)
	if c.elog != nil {
		onNew = func(ev *Event) { c.elog.Append(record(ev)) }
	}
	c.stream = NewStream(onNew)
	if c.elog != nil && r.cfg.EvictAfter > 0 {
		c.stream.load = c.loadEvents
	}
	c.hist = &chatHistory{}
	c.stream.onDrop = func() { r.metrics.dropped.Add(1) }
	c.redact = r.redactor(m.Person)
	c.stream.redact = c.redact
	c.hold = clientevent.NewTextHold(c.redact)
	c.stream.restore(events)
	for _, ev := range events {
		c.observeLocked(ev, nil)
	}
	c.cli = r.cfg.Launcher.Launch(SessionParams{ID: m.ID, Person: m.Person, CLISessionID: m.CLISessionID,
		Fork: m.Fork, ResumeAt: m.ResumeAt,
		Settings: supervisor.Settings{Model: m.Model, PermissionMode: m.PermissionMode, MaxThinkingTokens: m.MaxThinkingTokens,
			Effort: m.Effort},
		Sink: c, Chat: c})
	r.mu.Lock()
	r.byID[m.ID] = c
	r.mu.Unlock()
	return c, err
}

// restore reopens a session read from the store. A turn the server was in
// the middle of when it stopped is closed with an error, so clients that
// replay the log see it end.
func (r *Registry) restore(l loaded) error {
	c, err := r.open(l.meta, l.events)
	if ids := openDrafts(l.events); len(ids) > 0 {
		// Drafts live in memory: a restart expires them.
		c.mu.Lock()
		for _, id := range ids {
			c.stream.publishJSON(draftAnsweredEvent{Type: "draft_answered", RequestID: id, Outcome: "expired", Reason: "restart"}, false, false)
		}
		c.mu.Unlock()
	}
	if c.stream.TurnOpen() {
		c.mu.Lock()
		// Questions and permissions of the cut-off turn can no longer be
		// answered: close them, then the turn.
		for _, p := range unanswered(l.events) {
			c.stream.publishJSON(answeredEvent{Type: p.kind + "_answered", RequestID: p.id, Outcome: "cancelled"}, false, false)
		}
		if e := c.stream.publishJSON(clientevent.Restarted(), false, true); e != nil {
			c.observeLocked(e, nil)
		}
		c.mu.Unlock()
	}
	// Nothing needs the events until a client asks for them.
	c.evict()
	return err
}

// unanswered lists the questions and permission prompts of the last turn
// that have no *_answered event, in order.
func unanswered(events []*Event) []ask {
	if len(events) == 0 {
		return nil
	}
	turn := events[len(events)-1].Turn
	var open []ask
	for _, ev := range events {
		if ev.Turn != turn {
			continue
		}
		var e struct {
			RequestID string `json:"request_id"`
		}
		switch ev.Type {
		case "question", "permission":
			_ = json.Unmarshal(ev.Line, &e)
			open = append(open, ask{id: e.RequestID, kind: ev.Type})
		case "question_answered", "permission_answered":
			_ = json.Unmarshal(ev.Line, &e)
			for i, p := range open {
				if p.id == e.RequestID {
					open = append(open[:i], open[i+1:]...)
					break
				}
			}
		}
	}
	return open
}

// Get returns the person's session with id; ErrNotFound otherwise.
func (r *Registry) Get(id, person string) (*Session, error) {
	if id == "" {
		return nil, ErrNotFound
	}
	r.mu.Lock()
	c, ok := r.byID[id]
	away := r.away[person]
	r.mu.Unlock()
	if away {
		return nil, ErrMoving
	}
	if !ok || c.Person != person {
		return nil, ErrNotFound
	}
	return c, nil
}

// redactor is the Redactor of person's clients.
func (r *Registry) redactor(person string) *clientevent.Redactor {
	r.redactMu.Lock()
	defer r.redactMu.Unlock()
	red, ok := r.redactors[person]
	if !ok {
		red = r.cfg.ServerPaths.Redactor(person)
		r.redactors[person] = red
	}
	return red
}

// ClientText is text (an error's, a message's) as person's clients may
// read it: without the server's paths.
func (r *Registry) ClientText(person, text string) string {
	return r.redactor(person).Text(text)
}

func (r *Registry) active(person string) {
	if r.cfg.Active != nil && !r.Moving(person) {
		r.cfg.Active(person)
	}
}

// allLocked is every session; r.mu is held.
func (r *Registry) allLocked() []*Session {
	all := make([]*Session, 0, len(r.byID))
	for _, c := range r.byID {
		all = append(all, c)
	}
	return all
}

// sessionsOf is the person's sessions, in no order.
func (r *Registry) sessionsOf(person string) []*Session {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sessionsOfLocked(person)
}

func (r *Registry) sessionsOfLocked(person string) []*Session {
	var out []*Session
	for _, c := range r.byID {
		if c.Person == person {
			out = append(out, c)
		}
	}
	return out
}

// List returns the person's sessions, pinned ones first, then the most
// recently active.
func (r *Registry) List(person string) []SessionInfo {
	r.active(person)
	chats := r.sessionsOf(person)
	out := make([]SessionInfo, 0, len(chats))
	for _, c := range chats {
		out = append(out, c.Info())
	}
	sortChats(out)
	return out
}

// Clear ends the person's session and forgets it; false if there was none.
func (r *Registry) Clear(id, person string) bool {
	r.mu.Lock()
	c, ok := r.byID[id]
	if ok && c.Person == person {
		delete(r.byID, id)
	}
	r.mu.Unlock()
	if !ok || c.Person != person {
		return false
	}
	c.cancelQueue(supervisor.ErrClosed)
	c.cancel()
	if err := c.cli.Close(); err != nil {
		r.log.Warn().Err(err).Str("session", id).Msg("close session")
	}
	// Nothing of a cleared chat waits for its person any more.
	c.mu.Lock()
	c.notify.Settled(c.Person, c.ID, "")
	c.mu.Unlock()
	c.waitTurnStop()
	c.stream.Close()
	if c.elog != nil {
		_ = c.elog.Close()
	}
	if c.store != nil {
		if err := c.store.Remove(c.Person, id); err != nil {
			r.log.Warn().Err(err).Str("session", id).Msg("remove session state")
		}
	}
	return true
}

// Metrics is the relay's Prometheus handler.
func (r *Registry) Metrics() *Metrics { return r.metrics }

func (r *Registry) counts() (sessions, subscribers int) {
	r.mu.Lock()
	chats := r.allLocked()
	r.mu.Unlock()
	for _, c := range chats {
		subscribers += c.stream.Subscribers()
	}
	return len(chats), subscribers
}

// Send starts a turn in chat, unless the server is shutting down.
func (r *Registry) Send(ctx context.Context, c *Session, text string) error {
	return r.sendContent(ctx, c, text, nil)
}

// sendContent is Send for a message with content blocks before its text.
func (r *Registry) sendContent(ctx context.Context, c *Session, text string, blocks []json.RawMessage) error {
	r.mu.Lock()
	down := r.shutdown
	r.mu.Unlock()
	if down {
		return fmt.Errorf("%w: shutting down", ErrUnavailable)
	}
	// The budget is checked as the message is about to go to the model:
	// what the turns before it cost is known by then.
	budget, turns, err := r.allowance(c)
	if err != nil {
		return err
	}
	c.cli.SetLimits(budget, turns)
	if len(blocks) > 0 {
		return c.cli.SendContent(ctx, text, blocks)
	}
	return c.cli.Send(ctx, text)
}

// Shutdown refuses new turns, interrupts the running ones and waits until
// they have ended (their clients got their terminal events) or ctx ends.
func (r *Registry) Shutdown(ctx context.Context) {
	r.mu.Lock()
	r.shutdown = true
	chats := r.allLocked()
	r.mu.Unlock()
	// The starts of turns end first: a message still waiting for a
	// process slot must not take the one an interrupted turn frees below.
	r.stop()
	for _, c := range chats {
		c.cancelQueue(ErrShutdown)
		c.mu.Lock()
		c.stopping = true
		c.mu.Unlock()
	}
	var wg sync.WaitGroup
	for _, c := range chats {
		if !c.stream.TurnOpen() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Interrupt(ctx); err != nil && !errors.Is(err, supervisor.ErrNotRunning) {
				c.log.Warn().Err(err).Msg("interrupt at shutdown")
			}
			// The turn is over once its terminal event is in the stream,
			// and so in every subscriber's buffer.
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for c.stream.TurnOpen() {
				select {
				case <-tick.C:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	wg.Wait()
}

// Expire forgets sessions idle for longer than the TTL (state on disk
// included) and reports how many; running sessions are kept.
func (r *Registry) Expire() int {
	if r.cfg.TTL <= 0 {
		return 0
	}
	now := r.cfg.Now()
	var old []*Session
	r.mu.Lock()
	for _, c := range r.byID {
		c.mu.Lock()
		idle := now.Sub(c.lastActivity)
		// Nothing under way: no message running, waiting for a slot or
		// queued, no turn end, no rewind or fork holding it.
		busy := !c.idleLocked()
		c.mu.Unlock()
		if idle > r.cfg.TTL && !busy && !c.stream.TurnOpen() && !c.TerminalOpen() {
			old = append(old, c)
		}
	}
	r.mu.Unlock()
	n := 0
	for _, c := range old {
		if r.Clear(c.ID, c.Person) {
			n++
		}
	}
	return n
}

// Close ends every session, after the turn-end hooks still running have
// published their turns' ends.
func (r *Registry) Close() {
	r.endMu.Lock()
	r.closing = true
	r.endMu.Unlock()
	r.endings.Wait()
	r.mu.Lock()
	chats := r.allLocked()
	r.mu.Unlock()
	for _, c := range chats {
		c.cancelQueue(ErrShutdown)
		c.mu.Lock()
		c.stopping = true
		c.mu.Unlock()
	}
	r.stop()
	r.sweeps.Wait()
	defer r.starts.Wait()
	var wg sync.WaitGroup
	defer r.ledger.Close()
	for _, c := range chats {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.shutDown(); err != nil {
				c.log.Error().Err(err).Msg("flush event log")
			}
		}()
	}
	wg.Wait()
}

// shutDown ends the session's CLI (waiting for a turn's stop it asked
// for) and its stream, and writes what is kept of it: its index entry
// and its log, whose error it returns.
func (c *Session) shutDown() error {
	if err := c.cli.Close(); err != nil {
		c.log.Warn().Err(err).Msg("close session")
	}
	c.waitTurnStop()
	c.stream.Close()
	c.mu.Lock()
	c.persistLocked()
	c.mu.Unlock()
	if c.elog == nil {
		return nil
	}
	if err := c.elog.Close(); err != nil {
		return fmt.Errorf("write the log of session %s: %w", c.ID, err)
	}
	return nil
}
