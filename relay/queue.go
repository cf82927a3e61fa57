package relay

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/majorhq/major/attachments"
	"github.com/majorhq/major/clientevent"
	"github.com/majorhq/major/supervisor"
)

// A session runs one turn at a time. A message that arrives while a turn
// runs waits in the session's queue and runs after it, in order; a message
// that is the same text as one already on its way (the phone sending again
// after its connection dropped) joins that one instead of reaching the
// model twice.

// DefaultQueueLimit bounds the messages waiting in one session: enough for
// a person who types ahead, few enough that a runaway client cannot pile
// up work.
const DefaultQueueLimit = 8

// resendWindow is how long after its turn ended an answer that no
// chat-stream delivered is replayed to a resend of the same message,
// instead of sending the message again.
const resendWindow = 2 * time.Minute

// recentTurns bounds the finished turns kept for resends.
const recentTurns = 8

// Errors of the queue.
var (
	// ErrQueueFull refuses a message when the session's queue is full.
	ErrQueueFull = errors.New("too many messages are waiting in this session")
	// ErrCancelled ends a waiting message that was cancelled.
	ErrCancelled = errors.New("the message was cancelled before it ran")
	// ErrNotQueued is returned for a queue id that is not waiting (it ran
	// already, was cancelled, or never existed).
	ErrNotQueued = errors.New("no such waiting message")
)

// Ticket follows one message from the moment a session accepts it to the
// end of its turn. Clients that send the same message again follow the
// same ticket.
type Ticket struct {
	ID      string
	Message string
	// Accepted is when the session took the message.
	Accepted time.Time

	// draftsSeen is how many drafts the session had made when it took
	// the message: only those can the message decide.
	draftsSeen uint64

	// attached is what the message carries besides its text.
	attached Attached

	stream    bool // sent by a chat-stream, which delivers its answer
	opened    bool // sent without a known session id: it opened the session
	announced bool // it waited: the session's events show it queued

	// started is closed once the message's turn has started (turn and
	// startSeq set) or never will (err set).
	started chan struct{}
	// slotWait is closed when the message starts waiting for a free
	// process slot.
	slotWait chan struct{}
	slotOnce bool

	// cliStarted: the CLI started the message's turn (its start arrived;
	// its events may still wait to be published).
	cliStarted bool
	// Set under Session.mu; turn, startSeq and err before started closes.
	turn      int
	startSeq  int64
	err       error
	ended     time.Time
	delivered bool
}

// Queued reports whether the message waited in the queue (the session's
// events show it queued) rather than starting at once. It is set before
// Submit returns.
func (t *Ticket) Queued() bool { return t.announced }

// SlotWait is closed when the message starts waiting for a free process
// slot.
func (t *Ticket) SlotWait() <-chan struct{} { return t.slotWait }

// Turn is the number of the message's turn on the session's stream; read
// it once Started is closed.
func (t *Ticket) Turn() int { return t.turn }

// StartSeq is the stream's seq just before the turn's first event; read
// it once Started is closed.
func (t *Ticket) StartSeq() int64 { return t.startSeq }

func newTicket(message string, now time.Time) *Ticket {
	return &Ticket{ID: uuid.NewString(), Message: message, Accepted: now,
		started: make(chan struct{}), slotWait: make(chan struct{})}
}

// Files are the files the message carries.
func (t *Ticket) Files() []attachments.File { return t.attached.Files }

// Started is closed when the message's turn has started or it never will;
// Err then says which.
func (t *Ticket) Started() <-chan struct{} { return t.started }

// Err is why the message never ran; nil once its turn started. Only after
// Started is closed.
func (t *Ticket) Err() error { return t.err }

// QueuedMessage is one waiting message, as the queue endpoint lists it.
type QueuedMessage struct {
	ID       string    `json:"id"`
	Message  string    `json:"message"`
	Accepted time.Time `json:"accepted"`
}

// The queue's events on the session's events stream (compat clients never
// see them).
type (
	queuedEvent struct {
		Type     string `json:"type"`
		QueueID  string `json:"queue_id"`
		Message  string `json:"message"`
		Position int    `json:"position"`
	}
	queueCancelledEvent struct {
		Type    string `json:"type"`
		QueueID string `json:"queue_id"`
		Reason  string `json:"reason"`
	}
)

func (queuedEvent) EventType() string         { return "queued" }
func (queueCancelledEvent) EventType() string { return "queue_cancelled" }

// turnQueue is a session's running message and the ones waiting; it is
// guarded by Session.mu. At most one message is current, and none while
// an operation holds the session; a message waits while either is so.
type turnQueue struct {
	limit int
	// holder is the operation (a rewind, a fork) that holds the session
	// between turns, "" when none: no turn starts until it is done.
	holder string
	// current is the message whose turn the CLI runs or is being started;
	// nil when the session is free.
	current *Ticket
	// sent are the messages given to the session whose turns have not
	// ended on the stream yet, in order: a turn's events may still wait
	// behind the previous turn's end while the CLI runs the next.
	sent    []*Ticket
	waiting []*Ticket
	// recent are finished turns, oldest first, for resends.
	recent []*Ticket
	// toStart is the next message, made current when a turn ended, for
	// startQueued to start once Session.mu is released.
	toStart *Ticket
}

// SubmitOptions says where a message comes from.
type SubmitOptions struct {
	// Stream: a chat-stream (or chat) request, whose client sends the
	// message again after a dropped connection; the same text joins the
	// message already on its way.
	Stream bool
	// Opened: the request named no session of the person's.
	Opened bool
	// Attached is what the message carries besides its text.
	Attached Attached
}

// resendOf finds the message text (carrying content with digest) is a
// resend of: the running or a waiting message with that text and
// content, or a finished one whose answer no stream delivered, within
// resendWindow. openedOnly limits it to messages that opened their
// session. c.mu is held.
func (q *turnQueue) resendOf(text, digest string, openedOnly bool, now time.Time) *Ticket {
	match := func(t *Ticket) bool {
		return t.Message == text && t.attached.Content.Digest == digest && t.err == nil && (!openedOnly || t.opened)
	}
	for _, t := range q.sent {
		if match(t) {
			return t
		}
	}
	for _, t := range q.waiting {
		if match(t) {
			return t
		}
	}
	for i := len(q.recent) - 1; i >= 0; i-- {
		t := q.recent[i]
		if match(t) && t.stream && !t.delivered && now.Sub(t.ended) < resendWindow {
			return t
		}
	}
	return nil
}

// submit takes a message: a resend joins the ticket it repeats; otherwise
// the message starts now (start) or waits. A full queue refuses it.
func (c *Session) submit(text string, o SubmitOptions, now time.Time) (t *Ticket, start bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.terminal {
		return nil, false, ErrTerminalOpen
	}
	q := &c.queue
	if o.Stream {
		if t := q.resendOf(text, o.Attached.Content.Digest, false, now); t != nil {
			return t, false, nil
		}
	}
	t = newTicket(text, now)
	t.stream, t.opened, t.attached = o.Stream, o.Opened, o.Attached
	c.drafts.mu.Lock()
	t.draftsSeen = c.drafts.made
	c.drafts.mu.Unlock()
	if q.current == nil && len(q.waiting) == 0 && q.holder == "" {
		q.current = t
		q.sent = append(q.sent, t)
		return t, true, nil
	}
	if len(q.waiting) >= q.limit {
		return nil, false, fmt.Errorf("%w (at most %d)", ErrQueueFull, q.limit)
	}
	q.waiting = append(q.waiting, t)
	t.announced = true
	c.stream.publishJSON(queuedEvent{Type: "queued", QueueID: t.ID, Message: text, Position: len(q.waiting)}, false, false)
	return t, false, nil
}

// resendTarget is the message text (with content of that digest)
// repeats among those that opened a session of this chat, or nil.
func (c *Session) resendTarget(text, digest string, now time.Time) *Ticket {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.queue.resendOf(text, digest, true, now)
}

// queueSeesLocked updates the queue for an event of the session as it
// arrives, before any event is held back, and reports whether the event
// was for the queue only; advance lets a turn's end make the next
// waiting message current. c.mu is held.
func (c *Session) queueSeesLocked(ev supervisor.Event, advance bool) bool {
	q := &c.queue
	switch ev.Kind {
	case supervisor.EventSlotWait:
		if t := q.current; t != nil && !t.slotOnce {
			t.slotOnce = true
			close(t.slotWait)
		}
		return true
	case supervisor.EventTurnStart:
		if q.current == nil || q.current.cliStarted {
			// A turn started on the session directly holds the session
			// like any other.
			t := newTicket(ev.Text, ev.Time)
			q.current = t
			q.sent = append(q.sent, t)
		}
		q.current.cliStarted = true
		c.cliTurn.ticket = q.current
	case supervisor.EventTurnEnd:
		q.current = nil
		if advance {
			q.toStart = q.next()
		}
	}
	return false
}

// startTicketLocked gives the turn that ev opened (nil: the stream is closed)
// to the first message sent whose turn had not started. c.mu is held.
func (c *Session) startTicketLocked(ev *Event, text string, now time.Time) {
	q := &c.queue
	var t *Ticket
	for _, s := range q.sent {
		if s.turn == 0 && !isClosed(s.started) {
			t = s
			break
		}
	}
	if t == nil {
		t = newTicket(text, now)
		q.sent = append(q.sent, t)
	}
	if ev == nil {
		t.err = ErrStreamClosed
	} else {
		t.turn, t.startSeq = ev.Turn, ev.Seq-1
	}
	close(t.started)
}

// endTicketLocked retires the first message sent, whose turn just ended on the
// stream. c.mu is held.
func (c *Session) endTicketLocked(now time.Time) {
	q := &c.queue
	if len(q.sent) == 0 {
		return
	}
	t := q.sent[0]
	q.sent = q.sent[1:]
	if t.turn == 0 {
		return
	}
	t.ended = now
	q.recent = append(q.recent, t)
	if len(q.recent) > recentTurns {
		q.recent = q.recent[len(q.recent)-recentTurns:]
	}
}

// startQueued starts the message a turn end made current, if any; c.mu
// must not be held.
func (c *Session) startQueued() {
	c.mu.Lock()
	t := c.queue.toStart
	c.queue.toStart = nil
	c.mu.Unlock()
	if t != nil {
		c.dispatch(t)
	}
}

// next makes the first waiting message the current one. c.mu is held.
func (q *turnQueue) next() *Ticket {
	if len(q.waiting) == 0 || q.holder != "" {
		return nil
	}
	t := q.waiting[0]
	q.waiting = q.waiting[1:]
	q.current = t
	q.sent = append(q.sent, t)
	return t
}

// startFailed ends a message that could not start and returns the next
// one to start, if any.
func (c *Session) startFailed(t *Ticket, err error) *Ticket {
	c.mu.Lock()
	defer c.mu.Unlock()
	if isClosed(t.started) {
		return nil // its turn started after all; the turn carries the error
	}
	t.err = err
	close(t.started)
	if t.announced {
		c.stream.publishJSON(queueCancelledEvent{Type: "queue_cancelled", QueueID: t.ID, Reason: err.Error()}, false, false)
	}
	var over *BudgetError
	if errors.As(err, &over) {
		c.stream.publishJSON(clientevent.Refused{Type: "refused", QueueID: t.ID, Message: t.Message, Kind: clientevent.KindBudget, Error: over.Error()}, false, false)
		c.refusedLocked(over)
	}
	q := &c.queue
	for i, s := range q.sent {
		if s == t {
			q.sent = append(q.sent[:i:i], q.sent[i+1:]...)
			break
		}
	}
	if q.current != t {
		return nil
	}
	q.current = nil
	return q.next()
}

// occupy makes op (a rewind, a fork) hold the session between turns until
// release: messages that arrive meanwhile wait behind it. ErrBusy while
// a turn runs or ends, messages wait or another operation holds it;
// ErrTerminalOpen while a terminal has the conversation.
func (c *Session) occupy(op string) (release func(), err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := &c.queue
	switch {
	case c.terminal:
		return nil, ErrTerminalOpen
	case q.holder != "", q.current != nil, len(q.waiting) > 0, c.held.waiting(), c.stream.TurnOpen():
		return nil, supervisor.ErrBusy
	}
	q.holder = op
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			q.holder = ""
			q.toStart = q.next()
			c.mu.Unlock()
			c.startQueued()
		})
	}, nil
}

// CancelQueued cancels a waiting message; ErrNotQueued if id is not
// waiting.
func (c *Session) CancelQueued(id string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := &c.queue
	for i, t := range q.waiting {
		if t.ID == id {
			q.waiting = append(q.waiting[:i:i], q.waiting[i+1:]...)
			c.dropLocked(t, ErrCancelled)
			return nil
		}
	}
	return ErrNotQueued
}

// cancelQueue ends every waiting message with err.
func (c *Session) cancelQueue(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	waiting := c.queue.waiting
	c.queue.waiting = nil
	for _, t := range waiting {
		c.dropLocked(t, err)
	}
}

// dropLocked ends a waiting message that will not run. c.mu is held.
func (c *Session) dropLocked(t *Ticket, err error) {
	t.err = err
	close(t.started)
	reason := "cancelled"
	if !errors.Is(err, ErrCancelled) {
		reason = err.Error()
	}
	c.stream.publishJSON(queueCancelledEvent{Type: "queue_cancelled", QueueID: t.ID, Reason: reason}, false, false)
}

// Queue lists the waiting messages, in the order they will run.
func (c *Session) Queue() []QueuedMessage {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]QueuedMessage, 0, len(c.queue.waiting))
	for _, t := range c.queue.waiting {
		out = append(out, QueuedMessage{ID: t.ID, Message: t.Message, Accepted: t.Accepted})
	}
	return out
}

// Delivered records whether a chat-stream sent the whole of t's turn to
// its client: a later identical message is then a new one, while one
// after an undelivered answer is its resend. Record it before the last
// line goes out (and take it back if writing fails): the client may send
// its next message the moment it has read that line.
func (c *Session) Delivered(t *Ticket, delivered bool) {
	c.mu.Lock()
	t.delivered = delivered
	c.mu.Unlock()
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Submit hands text to chat: it starts now, waits in the queue, or joins
// the identical message already on its way.
func (r *Registry) Submit(c *Session, text string, o SubmitOptions) (*Ticket, error) {
	r.mu.Lock()
	down := r.shutdown
	r.mu.Unlock()
	if down {
		return nil, ErrShutdown
	}
	t, start, err := c.submit(text, o, r.cfg.Now())
	if err != nil {
		return nil, err
	}
	if start {
		r.dispatch(c, t)
	}
	return t, nil
}

// ResendTarget finds, among the person's sessions, a message with this
// text (and content of this digest, "" for none) that opened its session
// and is still running, waiting, or finished without its answer
// delivered: a client that lost its connection before it learnt the
// session id sends it again without one.
func (r *Registry) ResendTarget(person, text, digest string) (*Session, *Ticket) {
	chats := r.sessionsOf(person)
	now := r.cfg.Now()
	var best *Session
	var found *Ticket
	for _, c := range chats {
		if t := c.resendTarget(text, digest, now); t != nil && (found == nil || t.Accepted.After(found.Accepted)) {
			best, found = c, t
		}
	}
	return best, found
}

// dispatch starts t's turn, and after a message that cannot start, the
// next one. Sending waits for a process slot, so it runs on its own
// goroutine, which Close waits for.
func (r *Registry) dispatch(c *Session, t *Ticket) {
	r.endMu.Lock()
	if r.closing {
		r.endMu.Unlock()
		for t != nil {
			t = c.startFailed(t, ErrShutdown)
		}
		return
	}
	r.starts.Add(1)
	r.endMu.Unlock()
	go func() {
		defer r.starts.Done()
		// An interrupt that ends a turn (a draft's, or one whose output
		// passed its bound) must not reach this one.
		c.waitTurnStop()
		for t != nil {
			t = c.sent(t, r.sendTicket(c.ctx, c, t))
		}
	}()
}

// ErrUnavailable is returned when the server cannot take a turn now
// (shutting down, or no CLI slot freed in time).
var ErrUnavailable = errors.New("server is busy; try again shortly")

// ErrShutdown refuses messages once the server is shutting down.
var ErrShutdown = fmt.Errorf("%w: shutting down", ErrUnavailable)
