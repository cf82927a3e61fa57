package relay

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/majorhq/major/clientevent"
)

// Notifier hears from the session core what may need a person who is not
// looking: a question, permission prompt or draft that waits for them, a
// turn that ended, a message refused. It decides itself whether anyone is
// watching and what to send (package notify); the relay only tells. Its
// methods are called with the session's lock held, so they must not block
// and must not call back into the session: the lock order is Session.mu →
// the Notifier's own.
type Notifier interface {
	// Waiting: a question, permission prompt or draft waits for the person.
	Waiting(Waiting)
	// Settled: the request no longer waits (answered in any way, timed
	// out, cancelled, replaced). An empty requestID settles every request
	// of the session (it was cleared).
	Settled(person, sessionID, requestID string)
	// TurnEnded: a turn of the session ended, its terminal event
	// published.
	TurnEnded(TurnEnded)
	// Refused: a message never reached the model (a spent budget), or the
	// account the model is reached with is rate limited.
	Refused(Refusal)
}

// Waiting is a question, permission prompt or draft that waits for the
// person. Every text in it is as the person's clients see it (no server
// path).
type Waiting struct {
	Person    string
	SessionID string
	// Title is the chat's title.
	Title     string
	RequestID string
	// Kind is question, permission or draft; a draft is answered like a
	// permission prompt (Session.Answer with kind permission).
	Kind string
	// Questions are a question's questions.
	Questions []Question
	// Tool and Input are a permission's or draft's call (Input as
	// canonical JSON); What names it for the person ("the LinkedIn
	// post"), Reason says why the CLI asks, and Text is the words it
	// would publish, if it publishes any.
	Tool   string
	Input  json.RawMessage
	What   string
	Reason string
	Text   string
	// Expires is when the request is denied for want of an answer;
	// zero for a draft, which waits for the person's next message.
	Expires time.Time
}

// TurnEnded is a turn's end, as its clients saw it.
type TurnEnded struct {
	Person    string
	SessionID string
	Title     string
	// Outcome is success, interrupted or error.
	Outcome string
	// Answer is the text the turn answered with.
	Answer string
	// Error and ErrorKind are a failed turn's sentence and kind
	// (clientevent.Kind...).
	Error     string
	ErrorKind string
}

// Refusal is a message that never reached the model, or a rate limit of
// the model's account.
type Refusal struct {
	Person    string
	SessionID string
	Title     string
	// Kind is clientevent.KindBudget or clientevent.KindRateLimited.
	Kind string
	// Message is the sentence the person reads.
	Message string
	// Until is when a rate limit's window resets (zero when unknown): the
	// same window is one refusal, however many messages it holds up.
	Until time.Time
}

// noNotifier is the Notifier of a registry configured without one.
type noNotifier struct{}

func (noNotifier) Waiting(Waiting)                {}
func (noNotifier) Settled(string, string, string) {}
func (noNotifier) TurnEnded(TurnEnded)            {}
func (noNotifier) Refused(Refusal)                {}

// titleLocked is the chat's title as its clients see it. c.mu is held.
func (c *Session) titleLocked() string { return c.redact.Text(c.title) }

// waitingLocked fills in who and where a request waits, and takes the
// server's paths out of what it shows. c.mu is held.
func (c *Session) waitingLocked(w Waiting) Waiting {
	w.Person, w.SessionID, w.Title = c.Person, c.ID, c.titleLocked()
	qs := make([]Question, len(w.Questions))
	for i, q := range w.Questions {
		q.Question, q.Header = c.redact.Text(q.Question), c.redact.Text(q.Header)
		opts := make([]Option, len(q.Options))
		for j, o := range q.Options {
			opts[j] = Option{Label: c.redact.Text(o.Label), Description: c.redact.Text(o.Description)}
		}
		q.Options = opts
		qs[i] = q
	}
	w.Questions = qs
	if len(w.Input) > 0 {
		w.Input = c.redact.JSON(w.Input)
	}
	w.What, w.Reason, w.Text = c.redact.Text(w.What), c.redact.Text(w.Reason), c.redact.Text(w.Text)
	return w
}

// callWaiting describes a permission's or draft's call for the Notifier.
func callWaiting(kind string, policy AskPolicy, tool string, input json.RawMessage, reason string) Waiting {
	w := Waiting{Kind: kind, Tool: tool, Input: json.RawMessage(canonicalInput(input)), Reason: reason, What: tool}
	if policy.Describe != nil && policy.ConfirmInChat != nil && policy.ConfirmInChat(tool) {
		w.What = policy.Describe(tool, input)
	}
	var fields map[string]any
	if json.Unmarshal(input, &fields) == nil {
		if text, ok := fields["text"].(string); ok {
			w.Text = text
		}
	}
	return w
}

// turnEndedLocked is the Notifier's view of a turn ending with body, its
// terminal event, before the event is observed (the turn's text is still
// whole). c.mu is held.
func (c *Session) turnEndedLocked(body clientevent.Body) TurnEnded {
	e := TurnEnded{Person: c.Person, SessionID: c.ID, Title: c.titleLocked(), Answer: c.redact.Text(c.answerHead.String())}
	switch b := body.(type) {
	case clientevent.Done:
		e.Outcome = b.Outcome
	case clientevent.Error:
		e.Outcome, e.Error, e.ErrorKind = "error", b.Message, b.Kind
	default:
		e.Outcome = "error"
	}
	if e.Outcome == "" {
		e.Outcome = "success"
	}
	return e
}

// refusedLocked tells the Notifier of a message refused for a spent
// budget. c.mu is held.
func (c *Session) refusedLocked(over *BudgetError) {
	c.notify.Refused(Refusal{Person: c.Person, SessionID: c.ID, Title: c.titleLocked(),
		Kind: clientevent.KindBudget, Message: c.redact.Text(over.Error())})
}

// rateLimitedLocked tells the Notifier that the model's account is rate
// limited (the CLI's rate_limit_event said rejected). c.mu is held.
func (c *Session) rateLimitedLocked(rl clientevent.RateLimit) {
	r := Refusal{Person: c.Person, SessionID: c.ID, Title: c.titleLocked(), Kind: clientevent.KindRateLimited,
		Message: "The model's account is rate limited."}
	if rl.ResetsAt > 0 {
		r.Until = time.Unix(rl.ResetsAt, 0).UTC()
		r.Message = fmt.Sprintf("The model's account is rate limited until %s UTC.", r.Until.Format("2006-01-02 15:04"))
	}
	c.notify.Refused(r)
}
