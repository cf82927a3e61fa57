package relay

import (
	"encoding/json"
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
// draft. The model is told to show the person the exact content and ask.
// The person's next typed message decides the draft: a confirmation
// approves exactly that call (same tool, same input) once, for the turn the
// message starts; anything else declines it. Nothing but a message the
// person sent (never a tool result, a web page or the model's own text)
// reaches the decision, because it is taken where a turn starts with the
// person's message. A client on the events stream sees the draft and may
// answer it like a permission prompt instead; the first answer decides.

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
	event *Event // nil until published
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
// one, and tells the model to ask the person.
func (c *Session) holdDraft(req *supervisor.ControlRequest) supervisor.PermissionResult {
	input := req.Input
	if len(input) == 0 {
		input = json.RawMessage("{}")
	}
	d := &draft{id: uuid.NewString(), tool: req.ToolName, input: canonicalInput(input)}
	c.mu.Lock()
	c.drafts.mu.Lock()
	c.drafts.made++
	d.n = c.drafts.made
	if old := c.drafts.cur; old != nil && !old.approved {
		c.asks.markAnswered(old.id)
		c.publishInOrder(draftAnsweredEvent{Type: "draft_answered", RequestID: old.id, Outcome: "expired", Reason: "replaced"}, nil)
	}
	c.drafts.cur = d
	c.drafts.mu.Unlock()
	c.publishInOrder(draftEvent{Type: "draft", RequestID: d.id, Tool: d.tool, Input: json.RawMessage(d.input),
		Reason: "Waiting for the person to confirm in chat."}, func(e *Event) {
		c.drafts.mu.Lock()
		d.event = e
		c.drafts.mu.Unlock()
	})
	c.mu.Unlock()
	return supervisor.PermissionResult{Message: draftMessage(req.ToolName, input)}
}

// draftMessage tells the model what to do with a held-back call.
func draftMessage(tool string, input json.RawMessage) string {
	var fields map[string]any
	_ = json.Unmarshal(input, &fields)
	var b strings.Builder
	fmt.Fprintf(&b, "Not done yet: %s needs the person's confirmation, and nothing has been published. "+
		"Show the person the exact content below, word for word, and ask them to confirm it in their own words "+
		"(for example \"yes\" or \"ja\"). Only their next message can confirm it. If it does, call %s again with "+
		"exactly the same input and it will run once; any other reply cancels it, and a changed text needs a new confirmation.",
		tool, tool)
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

// draftHook follows the session's turns as the supervisor reports them:
// the message that starts a turn, the person's own words, decides the
// open draft; a turn's end drops an approval the model did not use in it.
// c.mu is held.
func (c *Session) draftHook(ev supervisor.Event) {
	c.drafts.mu.Lock()
	defer c.drafts.mu.Unlock()
	d := c.drafts.cur
	switch ev.Kind {
	case supervisor.EventTurnEnd:
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

// announceDraft publishes the decision taken when the turn being applied
// started, right after its turn_start. c.mu is held.
func (c *Session) announceDraft() {
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

// answerDraft is a client's card answer to the open draft; false if
// requestID is not the open, undecided draft. c.mu is held.
func (c *Session) answerDraft(requestID string, ans Answer) bool {
	c.drafts.mu.Lock()
	defer c.drafts.mu.Unlock()
	d := c.drafts.cur
	if d == nil || d.id != requestID || d.approved {
		return false
	}
	c.asks.markAnswered(d.id)
	ev := draftAnsweredEvent{Type: "draft_answered", RequestID: d.id, Outcome: "answered", Behavior: "deny", By: "card"}
	if ans.Allow {
		d.approved = true
		ev.Behavior = "allow"
	} else {
		c.drafts.cur = nil
	}
	// Remember is ignored: a draft approves exactly its own content once.
	c.publishInOrder(ev, nil)
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
