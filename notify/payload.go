package notify

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/majorhq/major/relay"
)

// The types of notification (Payload.Type), which are also the events a
// person may choose to be told of (Preferences.Events).
const (
	TypeQuestion   = "question"
	TypePermission = "permission"
	TypeDraft      = "draft"
	TypeDone       = "done"
	TypeError      = "error"
	TypeRefused    = "refused"
	// TypeTest is the notification "Send a test notification" sends; it
	// cannot be chosen away.
	TypeTest = "test"
)

// Types are the types a person may choose, in the order settings show
// them.
var Types = []string{TypeQuestion, TypePermission, TypeDraft, TypeDone, TypeError, TypeRefused}

// waits reports whether a type waits for the person's answer: quiet hours
// never hold those.
func waits(typ string) bool {
	return typ == TypeQuestion || typ == TypePermission || typ == TypeDraft
}

// Payload is what a notification says and offers, the same on every
// channel: the JSON a Web Push carries (and the service worker shows),
// the data of an FCM message, and what an ntfy message is made of.
type Payload struct {
	Type      string `json:"type"`
	SessionID string `json:"session_id,omitempty"`
	RequestID string `json:"request_id,omitempty"`
	// Title is the chat's title.
	Title string `json:"title"`
	// Body is what the person must know: the question and its options,
	// the tool and what it will do, the exact words of a draft, the first
	// line of an answer, or an error's sentence.
	Body string `json:"body"`
	// Actions answer the request from the notification: each is a URL
	// that takes a POST with no other credential.
	Actions []Action `json:"actions"`
}

// Action is one button of a notification.
type Action struct {
	Label string `json:"label"`
	URL   string `json:"url"`
}

// choice is an action before its token is issued: its label and what it
// decides.
type choice struct {
	label    string
	decision Decision
}

// untitled is the title of a chat that has none yet.
const untitled = "New chat"

func title(t string) string {
	if t = strings.TrimSpace(t); t == "" {
		return untitled
	}
	return oneLine(t, 80)
}

// oneLine is the first line of s, at most n runes.
func oneLine(s string, n int) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = strings.TrimSpace(s[:i])
	}
	return cut(s, n)
}

// cut is s with at most n runes, marked … when cut.
func cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return strings.TrimRightFunc(string(r[:n-1]), func(r rune) bool { return r == ' ' || r == '\n' }) + "…"
}

// maxOptions is the most answer buttons a question gets (ntfy shows at
// most three actions; a browser may show fewer).
const maxOptions = 3

// waitingContent is what a notification of a waiting request says, and
// the choices it offers.
func waitingContent(w relay.Waiting) (body string, choices []choice) {
	var b strings.Builder
	switch w.Kind {
	case TypeQuestion:
		for i, q := range w.Questions {
			if i > 0 {
				b.WriteString("\n\n")
			}
			b.WriteString(q.Question)
			for _, o := range q.Options {
				b.WriteString("\n• " + o.Label)
				if o.Description != "" {
					b.WriteString(" (" + o.Description + ")")
				}
			}
		}
		// One question with one answer: each option is a button. Several
		// questions or several answers need the app.
		if len(w.Questions) == 1 && !w.Questions[0].MultiSelect && len(w.Questions[0].Options) <= maxOptions {
			q := w.Questions[0]
			for _, o := range q.Options {
				choices = append(choices, choice{label: o.Label, decision: Decision{Kind: TypeQuestion, Question: q.Question, Label: o.Label}})
			}
		}
	case TypePermission:
		fmt.Fprintf(&b, "Allow %s?", w.What)
		if w.Reason != "" {
			b.WriteString(" " + w.Reason)
		}
		switch {
		case w.Text != "":
			b.WriteString("\n\n" + w.Text)
		case len(w.Input) > 2:
			b.WriteString("\n\n" + cut(string(w.Input), 300))
		}
		choices = []choice{
			{label: "Allow", decision: Decision{Kind: TypePermission, Allow: true}},
			{label: "Deny", decision: Decision{Kind: TypePermission}},
		}
	case TypeDraft:
		fmt.Fprintf(&b, "Publish %s? Word for word:\n\n", w.What)
		if w.Text != "" {
			b.WriteString(w.Text)
		} else {
			b.Write(w.Input)
		}
		choices = []choice{
			{label: "Publish", decision: Decision{Kind: TypeDraft, Allow: true}},
			{label: "Decline", decision: Decision{Kind: TypeDraft}},
		}
	}
	return b.String(), choices
}

// endContent is what a notification of a turn's end says.
func endContent(e relay.TurnEnded) (typ, body string) {
	if e.Outcome == "error" {
		if e.Error == "" {
			return TypeError, "The reply failed."
		}
		return TypeError, e.Error
	}
	if line := oneLine(e.Answer, 200); line != "" {
		return TypeDone, line
	}
	return TypeDone, "The reply is ready."
}

// summary is the body of a notification that must not carry the chat's
// text (ntfy and FCM with content summary): what happened, and where.
func summary(typ, chat string) string {
	switch typ {
	case TypeQuestion, TypePermission, TypeDraft:
		return "Major needs your answer in " + chat
	case TypeDone:
		return "Major has answered in " + chat
	case TypeError:
		return "Major ran into a problem in " + chat
	case TypeRefused:
		return "Major could not take your message in " + chat
	}
	return "A test notification from Major"
}

// Summarized is p without the chat's text: the title "Major" and a body
// that only names the chat. The actions stay: they carry no text but
// their labels.
func (p Payload) Summarized() Payload {
	p.Body = summary(p.Type, p.Title)
	p.Title = "Major"
	return p
}

// fit shortens p's body (and, if that is not enough, its title) until
// its JSON is at most limit bytes, marking the cut; it reports whether it
// had to cut.
func (p *Payload) fit(limit int) bool {
	size := func() int {
		b, _ := json.Marshal(p)
		return len(b)
	}
	if size() <= limit {
		return false
	}
	body := []rune(p.Body)
	// A rune is at most 6 bytes of JSON (\uXXXX), so each step cuts at
	// least what is over.
	for k := len(body); k > 0; {
		p.Body = strings.TrimRightFunc(string(body[:k]), unicode.IsSpace) + cutMark
		over := size() - limit
		if over <= 0 {
			return true
		}
		k -= max(1, (over+5)/6)
	}
	p.Body = ""
	for t := []rune(p.Title); len(t) > 0 && size() > limit; t = t[:len(t)-1] {
		p.Title = string(t[:len(t)-1])
	}
	return true
}

// cutMark ends a body that was cut to fit the channel.
const cutMark = " [cut: open the chat for the whole text]"
