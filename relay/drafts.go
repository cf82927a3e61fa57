package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"unicode"

	"github.com/google/uuid"
	"golang.org/x/text/unicode/norm"

	"github.com/majorhq/major/clientevent"
	"github.com/majorhq/major/supervisor"
)

// Confirm-in-chat: a tool that needs the person's approval, called while no
// client that can answer a permission prompt is attached, is held back as a
// draft. The server itself shows the person the exact content and how to
// approve it, as the turn's last text, and ends the turn there: whatever
// the model says after the held-back call never reaches the person, so
// their answer can only be about what they were shown. The model is told
// what was shown. The person's next typed message decides the draft: a
// confirmation approves exactly that call (same tool, same input) once,
// for the turn the message starts; anything else declines it. Nothing but
// a message the person sent (never a tool result, a web page or the
// model's own text) reaches the decision, because it is taken where a turn
// starts with the person's message. A client on the events stream sees
// the draft and may answer it like a permission prompt instead; the first
// answer decides.
//
// How the turn ends: the held-back call is denied with a message for the
// model, and once the CLI has put that denial into the conversation (its
// tool_result comes by), the server interrupts the turn; a deny with
// "interrupt" would end it at once, but the CLI then records a generic
// rejection instead of the message, and the next turn's model would not
// know that the draft was shown and waits for confirmation. The model's
// text and tool calls after the draft are not shown, and the turn ends
// with the server's text of the draft and an ordinary done.

// confirmations are the messages that approve a draft, in the persons'
// languages (English and German), as confirmationKey normalises them.
var confirmations = map[string]bool{}

func init() {
	for _, s := range []string{
		// English
		"yes", "y", "yep", "yeah", "yup", "ok", "okay", "sure", "confirm", "confirmed",
		"approve", "approved", "go", "go ahead", "do it", "post it", "publish it", "send it",
		"yes please", "yes post it", "yes publish it", "yes go ahead", "yes do it",
		"ok post it", "ok publish it", "ok go ahead", "okay post it", "sure go ahead",
		// German
		"ja", "j", "jo", "jawohl", "klar", "passt", "mach", "mach es", "mach das", "mach mal",
		"los", "leg los", "gerne", "einverstanden", "in ordnung", "bestätigt", "bestätige",
		"poste es", "post es", "posten", "veröffentlichen", "veröffentliche es", "veröffentlich es",
		"ja bitte", "ja poste es", "ja veröffentlichen", "ja veröffentliche es", "ja mach", "ja mach es",
		"ok mach", "ok poste es", "abschicken", "schick es ab",
	} {
		confirmations[confirmationKey(s)] = true
	}
}

// confirmationKey normalises a message for the confirmation list: Unicode
// NFC, lower case, every character that is not a letter or a digit taken
// as a space, words joined by one space.
func confirmationKey(msg string) string {
	msg = strings.ToLower(norm.NFC.String(msg))
	return strings.Join(strings.FieldsFunc(msg, func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	}), " ")
}

// IsConfirmation reports whether the person's whole message, normalised,
// is one of the confirmations.
func IsConfirmation(msg string) bool { return confirmations[confirmationKey(msg)] }

type draftEvent struct {
	Type      string          `json:"type"`
	RequestID string          `json:"request_id"`
	Tool      string          `json:"tool"`
	Input     json.RawMessage `json:"input"`
	Reason    string          `json:"reason"`
}

type draftAnsweredEvent struct {
	Type      string `json:"type"`
	RequestID string `json:"request_id"`
	// Outcome is answered (Behavior and By say how) or expired (Reason
	// says why).
	Outcome  string `json:"outcome"`
	Behavior string `json:"behavior,omitempty"` // allow, deny
	By       string `json:"by,omitempty"`       // chat, card
	Reason   string `json:"reason,omitempty"`   // replaced, restart
}

func (draftEvent) EventType() string         { return "draft" }
func (draftAnsweredEvent) EventType() string { return "draft_answered" }

// draft is one held-back tool call.
type draft struct {
	id    string
	tool  string
	input string // canonical JSON
	// toolUseID is the CLI's id of the held-back call.
	toolUseID string
	event     *Event // nil until published
	// n numbers the session's drafts: a message decides this draft only
	// if the session accepted it after the draft was made.
	n uint64
	// approved: the person confirmed it; live: the turn it may run in has
	// started (it expires when that turn ends).
	approved, live bool
}

// drafts is a session's draft: at most one at a time.
type drafts struct {
	mu  sync.Mutex
	cur *draft
	// made counts the drafts made so far.
	made uint64
	// announce holds, per turn started and not yet published, the
	// decision to publish after its turn_start (nil: none).
	announce []*draftAnsweredEvent
	// shown holds, by the CLI's tool_use id, each draft shown in a turn
	// whose events are not all published yet.
	shown map[string]*shownDraft
	// stopping: the CLI's running turn showed a draft and is being
	// ended; nothing more runs in it.
	stopping bool
	// interrupted is closed once the interrupt that ends a draft's turn
	// (or one whose output passed its bound) was answered (nil: none was
	// sent). The next turn starts after it, so the interrupt can never
	// reach that one.
	interrupted chan struct{}
	// view is what the turn being published shows of the model (only
	// under Session.mu, in applyLocked).
	view draftView
}

// ShowsDraft reports whether the session's running turn showed the
// person a draft and is being ended: no tool may run in it any more (the
// vault guard's hook denies every one, closing the moment between the
// draft's denial and the interrupt that ends the turn).
func (c *Session) ShowsDraft() bool {
	c.drafts.mu.Lock()
	defer c.drafts.mu.Unlock()
	return c.drafts.stopping
}

// shownDraft is a draft the server shows the person: text is what the
// turn ends with; turn is the CLI's turn that held it back.
type shownDraft struct {
	text    string
	turn    int
	stopped bool // the interrupt that ends its turn was sent
}

// draftView follows, in the order the turn's events are published, the
// publishing calls of the turn: text the model writes after such a call
// in the same message waits until the call is decided (held), and once a
// draft is shown (shown, its text) the model's words are not published.
type draftView struct {
	watch map[string]bool
	held  []clientevent.Text
	shown string
	// said: text of the turn's went out (the draft's then follows a
	// blank line).
	said bool
}

// canonicalInput is the tool input with sorted keys and no spacing, so the
// same content compares equal however the model spelled it.
func canonicalInput(raw json.RawMessage) string {
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		return strings.TrimSpace(string(raw))
	}
	b, err := clientevent.Marshal(v)
	if err != nil {
		return strings.TrimSpace(string(raw))
	}
	return string(b)
}

// takeApproved runs a call that matches the approved draft of the running
// turn, once. It reports whether it did.
func (c *Session) takeApproved(tool string, input json.RawMessage) bool {
	key := canonicalInput(input)
	c.drafts.mu.Lock()
	defer c.drafts.mu.Unlock()
	d := c.drafts.cur
	if d == nil || !d.approved || !d.live || d.tool != tool || d.input != key {
		return false
	}
	c.drafts.cur = nil
	return true
}

// holdDraft records the call as the session's draft, replacing an earlier
// one, has the server show it to the person as the turn's last text, and
// tells the model so.
func (c *Session) holdDraft(req *supervisor.ControlRequest, policy AskPolicy) supervisor.PermissionResult {
	input := req.Input
	if len(input) == 0 {
		input = json.RawMessage("{}")
	}
	d := &draft{id: uuid.NewString(), tool: req.ToolName, input: canonicalInput(input), toolUseID: req.ToolUseID}
	c.mu.Lock()
	c.drafts.mu.Lock()
	c.drafts.made++
	d.n = c.drafts.made
	if old := c.drafts.cur; old != nil && !old.approved {
		c.asks.markAnswered(old.id)
		c.notify.Settled(c.Person, c.ID, old.id)
		c.publishInOrderLocked(draftAnsweredEvent{Type: "draft_answered", RequestID: old.id, Outcome: "expired", Reason: "replaced"}, nil)
	}
	c.drafts.cur = d
	if d.toolUseID != "" {
		c.drafts.stopping = true
		if c.drafts.shown == nil {
			c.drafts.shown = map[string]*shownDraft{}
		}
		c.drafts.shown[d.toolUseID] = &shownDraft{text: shownText(policy, req.ToolName, input), turn: c.cliTurns}
	}
	c.drafts.mu.Unlock()
	c.publishInOrderLocked(draftEvent{Type: "draft", RequestID: d.id, Tool: d.tool, Input: json.RawMessage(d.input),
		Reason: "Waiting for the person to confirm in chat."}, func(e *Event) {
		c.drafts.mu.Lock()
		d.event = e
		c.drafts.mu.Unlock()
	})
	w := callWaiting("draft", policy, req.ToolName, input, "")
	w.RequestID = d.id
	c.notify.Waiting(c.waitingLocked(w))
	c.mu.Unlock()
	return supervisor.PermissionResult{Message: draftMessage(req.ToolName, input, d.toolUseID != "")}
}

// draftMessage tells the model what became of a held-back call: that the
// server showed it to the person and ends the turn, or, for a call
// without an id to end the turn at (never from the CLI), that the model
// must show it.
func draftMessage(tool string, input json.RawMessage, shown bool) string {
	var fields map[string]any
	_ = json.Unmarshal(input, &fields)
	var b strings.Builder
	fmt.Fprintf(&b, "Not published yet: %s needs the person's confirmation. ", tool)
	if shown {
		b.WriteString("The server has shown the person the exact content below and asked them to reply \"yes\" to publish it, " +
			"and it ends this turn here (the conversation records that as an interruption by the user), so add nothing now. ")
	} else {
		b.WriteString("Show the person the exact content below, word for word, and ask them to reply \"yes\" to publish it. ")
	}
	fmt.Fprintf(&b, "Only the person's next message can confirm it. If it does, call %s again with exactly the same input "+
		"and it will run once; any other reply cancels it, and a changed text needs a new confirmation.", tool)
	if text, ok := fields["text"].(string); ok {
		b.WriteString("\n\nText:\n")
		b.WriteString(text)
		delete(fields, "text")
	}
	if len(fields) > 0 {
		rest, _ := clientevent.Marshal(fields)
		b.WriteString("\n\nOther input: ")
		b.Write(rest)
	}
	return b.String()
}

// shownText is what the server shows the person for a held-back call:
// the words it would publish and how to approve them.
func shownText(policy AskPolicy, tool string, input json.RawMessage) string {
	var fields map[string]any
	_ = json.Unmarshal(input, &fields)
	what := tool
	if policy.Describe != nil {
		what = policy.Describe(tool, input)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Nothing is published yet. This is %s, word for word:\n\n", what)
	if text, ok := fields["text"].(string); ok {
		b.WriteString(text)
		delete(fields, "text")
		if policy.Describe == nil && len(fields) > 0 {
			rest, _ := clientevent.Marshal(fields)
			b.WriteString("\n\n")
			b.Write(rest)
		}
	} else {
		b.WriteString(canonicalInput(input))
	}
	if w := policy.warning(tool, input); w != "" {
		b.WriteString("\n\n" + w)
	}
	b.WriteString("\n\nReply \"yes\" to publish it exactly as shown; any other reply cancels it.")
	return b.String()
}

// draftStopping reports whether the CLI's running turn showed a draft
// and is being ended.
func (c *Session) draftStopping() bool {
	c.drafts.mu.Lock()
	defer c.drafts.mu.Unlock()
	return c.drafts.stopping
}

// stopTurnLocked interrupts the CLI's running turn, in the background:
// one that showed a draft, now that the conversation holds what the model
// was told about it, or one whose output passed its bound (bounds.go).
// Nothing is sent while an interrupt is still on its way. c.mu and
// c.drafts.mu are held.
func (c *Session) stopTurnLocked(why string) {
	if ch := c.drafts.interrupted; ch != nil && !isClosed(ch) {
		return
	}
	done := make(chan struct{})
	c.drafts.interrupted = done
	go func() {
		defer close(done)
		// The CLI answers an interrupt or is killed within its grace.
		if err := c.cli.Interrupt(context.Background()); err != nil && !errors.Is(err, supervisor.ErrNotRunning) {
			c.log.Warn().Err(err).Msg("interrupt " + why)
		}
	}()
}

// waitTurnStop waits until the interrupt that ended a turn (stopTurnLocked)
// was answered: a turn sent after it starts only then.
func (c *Session) waitTurnStop() {
	c.drafts.mu.Lock()
	ch := c.drafts.interrupted
	c.drafts.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

// toolResults are the tool_use ids a CLI message reports results of.
func toolResults(m *supervisor.Message) []string {
	if m == nil || m.Type != "user" || m.Message == nil {
		return nil
	}
	var ids []string
	for _, b := range m.Message.Content {
		if b.Type == "tool_result" {
			ids = append(ids, b.ToolUseID)
		}
	}
	return ids
}

// draftHookLocked follows the session's turns as the supervisor reports them:
// the message that starts a turn, the person's own words, decides the
// open draft; a turn's end drops an approval the model did not use in it;
// once the denial of a shown draft is in the conversation, the turn is
// interrupted. c.mu is held.
func (c *Session) draftHookLocked(ev supervisor.Event) {
	c.drafts.mu.Lock()
	defer c.drafts.mu.Unlock()
	d := c.drafts.cur
	switch ev.Kind {
	case supervisor.EventCLI:
		for _, id := range toolResults(ev.Msg) {
			if sd := c.drafts.shown[id]; sd != nil && !sd.stopped {
				sd.stopped = true
				c.stopTurnLocked("after a draft was shown")
			}
		}
	case supervisor.EventTurnEnd:
		c.drafts.stopping = false
		if d != nil && d.live {
			c.drafts.cur = nil
		}
	case supervisor.EventTurnStart:
		var ann *draftAnsweredEvent
		switch {
		case d == nil:
		case d.approved:
			// Answered on a card before this turn: it may run in it.
			d.live = true
		default:
			c.asks.markAnswered(d.id)
			c.notify.Settled(c.Person, c.ID, d.id)
			ann = &draftAnsweredEvent{Type: "draft_answered", RequestID: d.id, Outcome: "answered", Behavior: "deny", By: "chat"}
			// Only a message the person sent after the draft was made
			// can confirm it: a "yes" typed ahead, while the model was
			// still working, answered something else.
			t := c.queue.current
			sawDraft := t != nil && t.Message == ev.Text && t.draftsSeen >= d.n
			if sawDraft && IsConfirmation(ev.Text) {
				d.approved, d.live = true, true
				ann.Behavior = "allow"
			} else {
				c.drafts.cur = nil
			}
		}
		c.drafts.announce = append(c.drafts.announce, ann)
	}
}

// announceDraftLocked publishes the decision taken when the turn being applied
// started, right after its turn_start. c.mu is held.
func (c *Session) announceDraftLocked() {
	c.drafts.mu.Lock()
	defer c.drafts.mu.Unlock()
	if len(c.drafts.announce) == 0 {
		return
	}
	ann := c.drafts.announce[0]
	c.drafts.announce = c.drafts.announce[1:]
	if ann != nil {
		c.stream.publishJSON(*ann, false, false)
	}
}

// endShownLocked is the end of a turn as its clients see it: a turn that
// showed a draft ended because the server ended it there, which is its
// ordinary end, not an interruption or a failure. c.mu is held.
func (c *Session) endShownLocked(ev supervisor.Event) supervisor.Event {
	if c.drafts.view.shown == "" {
		return ev
	}
	ev.Interrupted, ev.Err = false, nil
	if ev.Msg != nil && ev.Msg.IsError {
		m := *ev.Msg
		m.IsError = false
		ev.Msg = &m
	}
	return ev
}

// viewDraftLocked passes the client events of one supervisor event through the
// turn's draftView: it holds back, drops or releases the model's text and
// tool events around the turn's publishing calls, and ends a turn that
// showed a draft with the draft's text. c.mu is held.
func (c *Session) viewDraftLocked(ev supervisor.Event, outs []clientevent.Out) []clientevent.Out {
	v := &c.drafts.view
	switch ev.Kind {
	case supervisor.EventTurnStart:
		*v = draftView{}
		return outs
	case supervisor.EventTurnEnd:
		var last []clientevent.Out
		if v.shown != "" {
			text := v.shown
			if v.said {
				text = "\n\n" + text
			}
			last = append(last, clientevent.Out{Body: clientevent.Text{Type: "text", Delta: text}})
		} else {
			for _, t := range v.held {
				last = append(last, clientevent.Out{Body: t})
			}
		}
		*v = draftView{}
		c.drafts.mu.Lock()
		for id, sd := range c.drafts.shown {
			if sd.turn <= c.endedTurns {
				delete(c.drafts.shown, id)
			}
		}
		c.drafts.mu.Unlock()
		return append(last, outs...)
	case supervisor.EventCLI:
	default:
		return outs
	}
	kept := outs[:0:0]
	for _, o := range outs {
		switch b := o.Body.(type) {
		case clientevent.Text:
			if v.shown != "" {
				continue
			}
			if len(v.watch) > 0 {
				v.held = append(v.held, b)
				continue
			}
		case clientevent.Tool, clientevent.Status, clientevent.ToolResult:
			if v.shown != "" {
				continue
			}
		}
		kept = append(kept, o)
	}
	m := ev.Msg
	if m.Type == "assistant" && m.Message != nil && (m.ParentToolUseID == nil || *m.ParentToolUseID == "") {
		if p := c.policy.Load(); p != nil && p.ConfirmInChat != nil {
			for _, b := range m.Message.Content {
				if b.Type == "tool_use" && p.ConfirmInChat(b.Name) {
					if v.watch == nil {
						v.watch = map[string]bool{}
					}
					v.watch[b.ID] = true
				}
			}
		}
	}
	for _, id := range toolResults(m) {
		delete(v.watch, id)
		c.drafts.mu.Lock()
		sd := c.drafts.shown[id]
		c.drafts.mu.Unlock()
		if sd != nil && v.shown == "" {
			v.shown, v.held = sd.text, nil
		}
	}
	if len(v.watch) == 0 && len(v.held) > 0 && v.shown == "" {
		// The calls were decided without a draft: the text they held
		// back comes out, before what decided them.
		release := make([]clientevent.Out, 0, len(v.held)+len(kept))
		for _, t := range v.held {
			release = append(release, clientevent.Out{Body: t})
		}
		v.held = nil
		kept = append(release, kept...)
	}
	for _, o := range kept {
		if _, ok := o.Body.(clientevent.Text); ok {
			v.said = true
		}
	}
	return kept
}

// answerDraftLocked is a client's card answer to the open draft; false if
// requestID is not the open, undecided draft. c.mu is held.
func (c *Session) answerDraftLocked(requestID string, ans Answer) bool {
	c.drafts.mu.Lock()
	defer c.drafts.mu.Unlock()
	d := c.drafts.cur
	if d == nil || d.id != requestID || d.approved {
		return false
	}
	c.asks.markAnswered(d.id)
	c.notify.Settled(c.Person, c.ID, d.id)
	ev := draftAnsweredEvent{Type: "draft_answered", RequestID: d.id, Outcome: "answered", Behavior: "deny", By: "card"}
	if ans.Allow {
		d.approved = true
		ev.Behavior = "allow"
	} else {
		c.drafts.cur = nil
	}
	// Remember is ignored: a draft approves exactly its own content once.
	c.publishInOrderLocked(ev, nil)
	return true
}

// pendingDraft is the event of the undecided draft, or nil.
func (c *Session) pendingDraft() *Event {
	c.drafts.mu.Lock()
	defer c.drafts.mu.Unlock()
	if d := c.drafts.cur; d != nil && !d.approved {
		return d.event
	}
	return nil
}

// openDrafts lists the drafts in a log that were never answered: after a
// restart they can no longer be confirmed.
func openDrafts(events []*Event) []string {
	var open []string
	for _, ev := range events {
		if ev.Type != "draft" && ev.Type != "draft_answered" {
			continue
		}
		var e struct {
			RequestID string `json:"request_id"`
		}
		_ = json.Unmarshal(ev.Line, &e)
		if ev.Type == "draft" {
			open = append(open, e.RequestID)
			continue
		}
		for i, id := range open {
			if id == e.RequestID {
				open = append(open[:i], open[i+1:]...)
				break
			}
		}
	}
	return open
}
