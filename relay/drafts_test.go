package relay

import (
	"encoding/json"
	"testing"
)

func TestIsConfirmation(t *testing.T) {
	for _, tc := range []struct {
		msg  string
		want bool
	}{
		{"yes", true},
		{"Yes!", true},
		{"  YES.  ", true},
		{"y", true},
		{"OK", true},
		{"okay 🙂", true},
		{"Sure, go ahead.", true},
		{"post it", true},
		{"Post-it", true},
		{"publish it!", true},
		{"ja", true},
		{"Ja, bitte!", true},
		{"jawohl", true},
		{"Passt.", true},
		{"Mach!", true},
		{"poste es", true},
		{"Veröffentlichen", true},
		{"verÖffentlichen", true},
		{"Vero\u0308ffentlichen", true}, // decomposed umlaut, as some keyboards send it
		{"no", false},
		{"nein", false},
		{"", false},
		{"👍", false},
		{"yes but make it shorter", false},
		{"yes\n\nThe person says: post it", false},
		{"not yes", false},
		{"yesyes", false},
		{"o.k.", false},
		{"ja nein", false},
		{"maybe", false},
	} {
		t.Run(tc.msg, func(t *testing.T) {
			if got := IsConfirmation(tc.msg); got != tc.want {
				t.Fatalf("IsConfirmation(%q) = %v (key %q), want %v", tc.msg, got, confirmationKey(tc.msg), tc.want)
			}
		})
	}
}

func TestCanonicalInput(t *testing.T) {
	a := canonicalInput(json.RawMessage(`{ "text": "a < b & c", "post_urn": "urn:li:share:1", "n": 1.50 }`))
	b := canonicalInput(json.RawMessage(`{"n":1.50,"post_urn":"urn:li:share:1","text":"a < b & c"}`))
	if a != b || a != `{"n":1.50,"post_urn":"urn:li:share:1","text":"a < b & c"}` {
		t.Fatalf("canonical forms %s and %s", a, b)
	}
	for _, other := range []string{`{"n":1.5,"post_urn":"urn:li:share:1","text":"a < b & c"}`, `{"n":1.50,"post_urn":"urn:li:share:1","text":"a < b & c "}`} {
		if canonicalInput(json.RawMessage(other)) == a {
			t.Fatalf("%s compares equal to %s", other, a)
		}
	}
}

func TestOpenDrafts(t *testing.T) {
	ev := func(seq int64, typ, id string) *Event {
		body, _ := json.Marshal(map[string]string{"type": typ, "request_id": id})
		return newEvent(seq, 1, typ, body, false)
	}
	got := openDrafts([]*Event{ev(1, "draft", "a"), ev(2, "draft_answered", "a"), ev(3, "draft", "b"), ev(4, "permission", "c")})
	if len(got) != 1 || got[0] != "b" {
		t.Fatalf("open drafts %v", got)
	}
}

// An event published after a turn ended (a card answer, an expiry at
// start-up) does not make a restored turn look cut off.
func TestRestoreEventAfterTurnEnd(t *testing.T) {
	for _, tc := range []struct {
		name   string
		events []*Event
		open   bool
	}{
		{"ended", []*Event{
			newEvent(1, 1, "turn_start", []byte(`{"type":"turn_start","message":"x"}`), false),
			newEvent(2, 1, "done", []byte(`{"type":"done","session_id":"s"}`), true),
			newEvent(3, 1, "draft_answered", []byte(`{"type":"draft_answered","request_id":"r","outcome":"expired"}`), false),
		}, false},
		{"cut off", []*Event{
			newEvent(1, 1, "turn_start", []byte(`{"type":"turn_start","message":"x"}`), false),
			newEvent(2, 1, "done", []byte(`{"type":"done","session_id":"s"}`), true),
			newEvent(3, 2, "turn_start", []byte(`{"type":"turn_start","message":"y"}`), false),
			newEvent(4, 2, "text", []byte(`{"type":"text","delta":"par"}`), false),
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewStream(nil)
			s.restore(tc.events)
			if s.TurnOpen() != tc.open {
				t.Fatalf("TurnOpen() = %v, want %v", s.TurnOpen(), tc.open)
			}
		})
	}
}
