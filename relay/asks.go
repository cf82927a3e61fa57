package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/majorhq/major/clientevent"
	"github.com/majorhq/major/supervisor"
)

// Errors of answering a question or a permission prompt.
var (
	ErrUnknownRequest  = errors.New("no such pending request")
	ErrAlreadyAnswered = errors.New("request was already answered")
)

// DefaultAskTimeout is how long a question or permission waits for the
// person before it is denied.
const DefaultAskTimeout = 10 * time.Minute

// Question is one AskUserQuestion question.
type Question struct {
	Question    string   `json:"question"`
	Header      string   `json:"header"`
	Options     []Option `json:"options"`
	MultiSelect bool     `json:"multiSelect"`
}

// Option is one choice of a Question.
type Option struct {
	Label       string `json:"label"`
	Description string `json:"description"`
}

type questionEvent struct {
	Type      string     `json:"type"`
	RequestID string     `json:"request_id"`
	Questions []Question `json:"questions"`
}

type permissionEvent struct {
	Type      string          `json:"type"`
	RequestID string          `json:"request_id"`
	Tool      string          `json:"tool"`
	Input     json.RawMessage `json:"input"`
	Reason    string          `json:"reason"`
	// CanRemember is false for a tool whose every call the person
	// approves on its own: an answer's remember is ignored for it, so a
	// client need not offer "for this session".
	CanRemember bool `json:"can_remember"`
}

type answeredEvent struct {
	Type      string            `json:"type"`
	RequestID string            `json:"request_id"`
	Outcome   string            `json:"outcome"` // answered, timeout, cancelled
	Answers   map[string]string `json:"answers,omitempty"`
	Behavior  string            `json:"behavior,omitempty"`
}

func (questionEvent) EventType() string   { return "question" }
func (permissionEvent) EventType() string { return "permission" }
func (e answeredEvent) EventType() string { return e.Type }

// Answer is a client's reply to a question (Answers) or a permission
// prompt (Allow, Message, Remember).
type Answer struct {
	Answers map[string]string
	Allow   bool
	Message string
	// Remember applies the answer to the tool's later calls in the
	// session; it is ignored for the tools the person approves call by
	// call (AskPolicy.ConfirmInChat).
	Remember bool
	// Interrupt denies and stops the turn (an interrupt arrived).
	Interrupt bool
}

type ask struct {
	id    string
	kind  string // question or permission
	turn  int    // the CLI's turn that asked (Session.cliTurns)
	event *Event // nil until published
	reply chan Answer
}

// asks holds one session's pending questions and permission prompts, and
// the tools the person allowed or denied for the rest of the session.
type asks struct {
	mu         sync.Mutex
	pending    map[string]*ask
	remembered map[string]bool     // tool -> allowed
	done       map[string]struct{} // recently answered request ids
}

func newAsks() *asks {
	return &asks{pending: map[string]*ask{}, remembered: map[string]bool{}}
}

// cancelUpTo ends the pending asks of the turns up to turn (the turn ended
// or was interrupted). c.mu is held.
func (a *asks) cancelUpTo(c *Session, turn int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for id, p := range a.pending {
		if p.turn > turn {
			continue
		}
		delete(a.pending, id)
		c.notify.Settled(c.Person, c.ID, id)
		p.reply <- Answer{Interrupt: true, Message: "The turn was interrupted."}
		c.publishInOrderLocked(answeredEvent{Type: p.kind + "_answered", RequestID: id, Outcome: "cancelled"}, nil)
	}
}

// PendingEvents returns the events of the questions and permission prompts
// still waiting, so a client that attaches after them sees them again.
func (c *Session) PendingEvents() []*Event {
	c.asks.mu.Lock()
	out := make([]*Event, 0, len(c.asks.pending)+1)
	for _, p := range c.asks.pending {
		if p.event != nil { // nil: waiting behind a turn's end
			out = append(out, p.event)
		}
	}
	c.asks.mu.Unlock()
	if d := c.pendingDraft(); d != nil {
		out = append(out, d)
	}
	return out
}

// Answer resolves a pending question or permission; the first answer wins.
func (c *Session) Answer(kind, requestID string, ans Answer) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.asks.mu.Lock()
	p, ok := c.asks.pending[requestID]
	if ok && p.kind == kind {
		delete(c.asks.pending, requestID)
	}
	c.asks.mu.Unlock()
	if !ok && kind == "permission" && c.answerDraftLocked(requestID, ans) {
		return nil
	}
	if !ok || p.kind != kind {
		if c.asks.wasAnswered(requestID) {
			return ErrAlreadyAnswered
		}
		return ErrUnknownRequest
	}
	c.asks.markAnswered(requestID)
	c.notify.Settled(c.Person, c.ID, requestID)
	p.reply <- ans
	ev := answeredEvent{Type: kind + "_answered", RequestID: requestID, Outcome: "answered", Answers: ans.Answers}
	if kind == "permission" {
		ev.Behavior = "deny"
		if ans.Allow {
			ev.Behavior = "allow"
		}
	}
	c.publishInOrderLocked(ev, nil)
	return nil
}

// answeredLimit bounds the answered request ids kept, so a late second
// answer gets 409 rather than 404.
const answeredLimit = 256

func (a *asks) markAnswered(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.done == nil {
		a.done = map[string]struct{}{}
	}
	if len(a.done) >= answeredLimit {
		clear(a.done)
	}
	a.done[id] = struct{}{}
}

func (a *asks) wasAnswered(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.done[id]
	return ok
}

// wait publishes an ask and blocks until it is answered, the timeout
// passes, or ctx ends (the CLI cancelled the request or exited). notice
// is what the Notifier hears of it.
func (c *Session) wait(ctx context.Context, kind string, body func(id string) clientevent.Body, timeout time.Duration, notice Waiting) (Answer, string, error) {
	id := uuid.NewString()
	p := &ask{id: id, kind: kind, reply: make(chan Answer, 1)}
	c.mu.Lock()
	p.turn = c.cliTurns
	c.asks.mu.Lock()
	c.asks.pending[id] = p
	c.asks.mu.Unlock()
	c.publishInOrderLocked(body(id), func(e *Event) {
		c.asks.mu.Lock()
		p.event = e
		c.asks.mu.Unlock()
	})
	notice.RequestID, notice.Expires = id, time.Now().Add(timeout)
	c.notify.Waiting(c.waitingLocked(notice))
	c.mu.Unlock()
	c.cli.SetWaiting(true)
	defer c.cli.SetWaiting(false)

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case ans := <-p.reply:
		return ans, "answered", nil
	case <-timer.C:
		c.expire(id, kind, "timeout")
		return Answer{}, "timeout", nil
	case <-ctx.Done():
		c.expire(id, kind, "cancelled")
		return Answer{}, "cancelled", ctx.Err()
	}
}

func (c *Session) expire(id, kind, outcome string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.asks.mu.Lock()
	_, ok := c.asks.pending[id]
	delete(c.asks.pending, id)
	c.asks.mu.Unlock()
	if ok {
		c.notify.Settled(c.Person, c.ID, id)
		c.publishInOrderLocked(answeredEvent{Type: kind + "_answered", RequestID: id, Outcome: outcome}, nil)
	}
}

// AskPolicy says how CanUseTool treats tools.
type AskPolicy struct {
	// Timeout for a question or permission to be answered.
	Timeout time.Duration
	// Ask reports whether a call of tool with input needs the person's
	// permission; calls it does not name are allowed (the CLI only asks
	// for tools outside the allowed set anyway).
	Ask func(tool string, input json.RawMessage) bool
	// ConfirmInChat reports whether a tool publishes for the person:
	// each of its calls is approved on its own (a remembered answer
	// never applies to it), and one called while no client can answer a
	// prompt is held back as a draft that the person's next message
	// confirms or declines (see drafts.go). Other tools are denied then.
	ConfirmInChat func(tool string) bool
	// Describe names, for the person, what a ConfirmInChat call would
	// publish (e.g. "the LinkedIn post"); nil: the tool's name.
	Describe func(tool string, input json.RawMessage) string
	// Warn, when not nil and it returns a text, is a warning about a
	// ConfirmInChat call for the person who approves it (an identical
	// publish whose outcome is unknown): on its card and in its draft.
	Warn func(tool string, input json.RawMessage) string
	// Approved, when not nil, is told of each ConfirmInChat call let
	// through, just before it runs: one the person approved (on a card
	// or in the chat), or one Ask let through without asking.
	Approved func(tool string, input json.RawMessage)
	// Changes, when not nil, reports whether tool changes the person's
	// notes: in plan mode such a call is refused, not asked, until the
	// person approves the plan (the CLI leaves plan mode then).
	Changes func(tool string) bool
}

// warning is policy's warning about a call, or "".
func (p AskPolicy) warning(tool string, input json.RawMessage) string {
	if p.Warn == nil {
		return ""
	}
	return p.Warn(tool, input)
}

// Messages the model sees when nobody can answer.
const (
	noClientQuestion   = "No one can answer interactive questions right now (no interactive client is attached). Ask the person in plain text in your reply instead, and continue without the answer."
	timeoutQuestion    = "The person did not answer in time. Ask in plain text in your reply instead, or continue without the answer."
	noClientPermission = "This tool needs the person's approval and no client that can approve is attached, so it was not run. Tell the person what you wanted to do."
	timeoutPermission  = "The person did not approve this tool in time, so it was not run."
	afterDraft         = "Not run: this turn ended when the server showed the person a draft, and nothing more runs in it until they answer."
	planFirst          = "Not run: this chat is in plan mode, where nothing in the notes changes before the person approves a plan. Present your plan with ExitPlanMode first."
)

// CanUseTool answers the CLI's can_use_tool requests for this chat:
// AskUserQuestion goes to the person as a question, other tools the policy
// names as a permission prompt.
func (c *Session) CanUseTool(policy AskPolicy) func(ctx context.Context, req *supervisor.ControlRequest) (supervisor.PermissionResult, error) {
	if policy.Timeout <= 0 {
		policy.Timeout = DefaultAskTimeout
	}
	c.policy.Store(&policy)
	return func(ctx context.Context, req *supervisor.ControlRequest) (supervisor.PermissionResult, error) {
		if c.draftStopping() {
			return supervisor.PermissionResult{Message: afterDraft}, nil
		}
		if req.ToolName == "AskUserQuestion" {
			return c.askQuestion(ctx, req, policy.Timeout)
		}
		if policy.Changes != nil && policy.Changes(req.ToolName) && c.cli.Settings().PermissionMode == "plan" {
			return supervisor.PermissionResult{Message: planFirst}, nil
		}
		if policy.Ask == nil || !policy.Ask(req.ToolName, req.Input) {
			if policy.Approved != nil && policy.ConfirmInChat != nil && policy.ConfirmInChat(req.ToolName) {
				// Let through without asking (a person who publishes so):
				// the publishing server runs only what passed here.
				policy.Approved(req.ToolName, req.Input)
			}
			return supervisor.PermissionResult{Allow: true, UpdatedInput: req.Input}, nil
		}
		return c.askPermission(ctx, req, policy)
	}
}

func (c *Session) askQuestion(ctx context.Context, req *supervisor.ControlRequest, timeout time.Duration) (supervisor.PermissionResult, error) {
	var in struct {
		Questions []Question `json:"questions"`
	}
	if err := json.Unmarshal(req.Input, &in); err != nil || len(in.Questions) == 0 {
		return supervisor.PermissionResult{Message: "AskUserQuestion needs a non-empty questions list."}, nil
	}
	if !c.Interactive() {
		return supervisor.PermissionResult{Message: noClientQuestion}, nil
	}
	ans, outcome, err := c.wait(ctx, "question", func(id string) clientevent.Body {
		return questionEvent{Type: "question", RequestID: id, Questions: in.Questions}
	}, timeout, Waiting{Kind: "question", Questions: in.Questions})
	switch {
	case err != nil:
		return supervisor.PermissionResult{Message: "The question was cancelled.", Interrupt: true}, nil
	case outcome == "timeout":
		return supervisor.PermissionResult{Message: timeoutQuestion}, nil
	case ans.Interrupt:
		return supervisor.PermissionResult{Message: ans.Message, Interrupt: true}, nil
	}
	var input map[string]json.RawMessage
	if err := json.Unmarshal(req.Input, &input); err != nil {
		return supervisor.PermissionResult{}, fmt.Errorf("decode AskUserQuestion input: %w", err)
	}
	answers, _ := json.Marshal(ans.Answers)
	input["answers"] = answers
	updated, _ := json.Marshal(input)
	return supervisor.PermissionResult{Allow: true, UpdatedInput: updated}, nil
}

func (c *Session) askPermission(ctx context.Context, req *supervisor.ControlRequest, policy AskPolicy) (supervisor.PermissionResult, error) {
	// A publishing call is approved for its own content only: "for this
	// session" would let texts through that the person never saw.
	oneByOne := policy.ConfirmInChat != nil && policy.ConfirmInChat(req.ToolName)
	c.asks.mu.Lock()
	allowed, remembered := c.asks.remembered[req.ToolName]
	c.asks.mu.Unlock()
	if remembered && !oneByOne {
		if allowed {
			return supervisor.PermissionResult{Allow: true, UpdatedInput: req.Input}, nil
		}
		return supervisor.PermissionResult{Message: "The person denied " + req.ToolName + " for this session."}, nil
	}
	approved := func() supervisor.PermissionResult {
		if oneByOne && policy.Approved != nil {
			policy.Approved(req.ToolName, req.Input)
		}
		return supervisor.PermissionResult{Allow: true, UpdatedInput: req.Input}
	}
	if c.takeApproved(req.ToolName, req.Input) {
		return approved(), nil
	}
	if !c.Interactive() {
		if policy.ConfirmInChat != nil && policy.ConfirmInChat(req.ToolName) {
			return c.holdDraft(req, policy), nil
		}
		return supervisor.PermissionResult{Message: noClientPermission}, nil
	}
	input := req.Input
	if len(input) == 0 {
		input = json.RawMessage("{}")
	}
	reason := permissionReason(req)
	if w := policy.warning(req.ToolName, input); w != "" {
		reason += " " + w
	}
	ans, outcome, err := c.wait(ctx, "permission", func(id string) clientevent.Body {
		return permissionEvent{Type: "permission", RequestID: id, Tool: req.ToolName, Input: input, Reason: reason,
			CanRemember: !oneByOne}
	}, policy.Timeout, callWaiting("permission", policy, req.ToolName, input, reason))
	switch {
	case err != nil:
		return supervisor.PermissionResult{Message: "The permission prompt was cancelled.", Interrupt: true}, nil
	case outcome == "timeout":
		return supervisor.PermissionResult{Message: timeoutPermission}, nil
	case ans.Interrupt:
		return supervisor.PermissionResult{Message: ans.Message, Interrupt: true}, nil
	}
	if ans.Remember && !oneByOne {
		c.asks.mu.Lock()
		c.asks.remembered[req.ToolName] = ans.Allow
		c.asks.mu.Unlock()
	}
	if ans.Allow {
		return approved(), nil
	}
	msg := ans.Message
	if msg == "" {
		msg = "The person denied permission for " + req.ToolName + "."
	}
	return supervisor.PermissionResult{Message: msg}, nil
}

// permissionReason is the CLI's explanation of why it asks, as text.
func permissionReason(req *supervisor.ControlRequest) string {
	var parts []string
	if req.Title != "" {
		parts = append(parts, req.Title)
	}
	if req.Description != "" {
		parts = append(parts, req.Description)
	}
	if len(req.DecisionReason) > 0 {
		var s string
		if json.Unmarshal(req.DecisionReason, &s) == nil {
			parts = append(parts, s)
		} else {
			var r struct {
				Type   string `json:"type"`
				Reason string `json:"reason"`
			}
			if json.Unmarshal(req.DecisionReason, &r) == nil && (r.Reason != "" || r.Type != "") {
				parts = append(parts, strings.TrimSpace(r.Type+" "+r.Reason))
			}
		}
	}
	if len(parts) == 0 {
		return req.ToolName + " needs your permission."
	}
	return strings.Join(parts, ": ")
}
