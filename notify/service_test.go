package notify_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/majorhq/major/clientevent"
	"github.com/majorhq/major/notify"
	"github.com/majorhq/major/relay"
)

func colorQuestion(session, request string) relay.Waiting {
	return relay.Waiting{Person: "sebastian", SessionID: session, Title: "Paint the shed", RequestID: request, Kind: "question",
		Questions: []relay.Question{{Question: "Which color?", Header: "Color", Options: []relay.Option{{Label: "Red", Description: "warm"}, {Label: "Blue", Description: "cool"}}}},
		Expires:   time.Date(2026, 3, 2, 12, 10, 0, 0, time.UTC)}
}

// TestWebPushIsEncryptedAndSigned: what a browser's push service gets
// decrypts with the subscription's private key (RFC 8291) to exactly the
// payload, and carries a VAPID signature (RFC 8292) by the server's key,
// whose public half the server publishes.
func TestWebPushIsEncryptedAndSigned(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	w.s.Waiting(colorQuestion("chat-1", "req-1"))
	w.clock.Advance(notifyAfter)
	got := w.pushes(t)
	if len(got) != 1 {
		t.Fatalf("%d pushes", len(got))
	}
	p := got[0]
	if p.Type != "question" || p.SessionID != "chat-1" || p.RequestID != "req-1" || p.Title != "Paint the shed" {
		t.Fatalf("payload %+v", p)
	}
	if p.Body != "Which color?\n• Red (warm)\n• Blue (cool)" {
		t.Fatalf("body %q", p.Body)
	}
	if len(p.Actions) != 2 || p.Actions[0].Label != "Red" || p.Actions[1].Label != "Blue" ||
		!strings.HasPrefix(p.Actions[1].URL, "https://major.example/api/claude/actions/") ||
		!strings.HasSuffix(p.Actions[1].URL, "?person=sebastian") {
		t.Fatalf("actions %+v", p.Actions)
	}
	if sub := w.push.Pushes()[0].Subject; sub != notify.DefaultContact {
		t.Fatalf("VAPID subject %q", sub)
	}
}

// TestNotifiedOnceWhenNobodyWatches: a request is notified once it has
// waited NotifyAfter with no client of its person watching its session
// (attached, its page visible), never while someone watches, never
// twice, never after it was settled.
func TestNotifiedOnceWhenNobodyWatches(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// run drives the service; it returns how many notifications are
		// expected.
		run func(t *testing.T, w *world) int
	}{
		{"nobody attached", func(t *testing.T, w *world) int {
			w.s.Waiting(colorQuestion("c", "r"))
			w.clock.Advance(notifyAfter - time.Second)
			if n := len(w.pushes(t)); n != 0 {
				return -1 // too early
			}
			w.clock.Advance(time.Hour)
			return 1
		}},
		{"a visible page watches", func(t *testing.T, w *world) int {
			defer w.s.Watch("sebastian", "c", "page-1", true)()
			w.s.Waiting(colorQuestion("c", "r"))
			w.clock.Advance(time.Hour)
			return 0
		}},
		{"a client without a page watches (a chat-stream)", func(t *testing.T, w *world) int {
			defer w.s.Watch("sebastian", "c", "", true)()
			w.s.Waiting(colorQuestion("c", "r"))
			w.clock.Advance(time.Hour)
			return 0
		}},
		{"the page is hidden", func(t *testing.T, w *world) int {
			defer w.s.Watch("sebastian", "c", "page-1", false)()
			w.s.Waiting(colorQuestion("c", "r"))
			w.clock.Advance(time.Hour)
			return 1
		}},
		{"the page hides while the question waits: counted from then", func(t *testing.T, w *world) int {
			defer w.s.Watch("sebastian", "c", "page-1", true)()
			w.s.Waiting(colorQuestion("c", "r"))
			w.clock.Advance(time.Hour)
			w.s.SetVisible("sebastian", "page-1", false)
			w.clock.Advance(notifyAfter - time.Second)
			if n := len(w.pushes(t)); n != 0 {
				return -1
			}
			w.clock.Advance(time.Second)
			return 1
		}},
		{"the page comes back before the time is up", func(t *testing.T, w *world) int {
			defer w.s.Watch("sebastian", "c", "page-1", false)()
			w.s.Waiting(colorQuestion("c", "r"))
			w.clock.Advance(notifyAfter / 2)
			w.s.SetVisible("sebastian", "page-1", true)
			w.clock.Advance(time.Hour)
			return 0
		}},
		{"the watcher leaves", func(t *testing.T, w *world) int {
			end := w.s.Watch("sebastian", "c", "", true)
			w.s.Waiting(colorQuestion("c", "r"))
			w.clock.Advance(time.Hour)
			end()
			w.clock.Advance(notifyAfter)
			return 1
		}},
		{"another person watching the same id is not this person", func(t *testing.T, w *world) int {
			defer w.s.Watch("petra", "c", "", true)()
			w.s.Waiting(colorQuestion("c", "r"))
			w.clock.Advance(time.Hour)
			return 1
		}},
		{"another chat watched", func(t *testing.T, w *world) int {
			defer w.s.Watch("sebastian", "other", "page-1", true)()
			w.s.Waiting(colorQuestion("c", "r"))
			w.clock.Advance(time.Hour)
			return 1
		}},
		{"settled before the time is up", func(t *testing.T, w *world) int {
			w.s.Waiting(colorQuestion("c", "r"))
			w.clock.Advance(notifyAfter / 2)
			w.s.Settled("sebastian", "c", "r")
			w.clock.Advance(time.Hour)
			return 0
		}},
		{"the chat was cleared", func(t *testing.T, w *world) int {
			w.s.Waiting(colorQuestion("c", "r"))
			w.s.Settled("sebastian", "c", "")
			w.clock.Advance(time.Hour)
			return 0
		}},
		{"never twice, however often nobody watches", func(t *testing.T, w *world) int {
			w.s.Waiting(colorQuestion("c", "r"))
			w.clock.Advance(time.Hour)
			w.s.Watch("sebastian", "c", "page-1", true)()
			w.clock.Advance(time.Hour)
			return 1
		}},
		{"the person chose not to hear of questions", func(t *testing.T, w *world) int {
			if err := w.s.SetPreferences("sebastian", notify.Preferences{Events: []string{"done"}}); err != nil {
				t.Fatal(err)
			}
			w.s.Waiting(colorQuestion("c", "r"))
			w.clock.Advance(time.Hour)
			return 0
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, nil)
			want := tc.run(t, w)
			if want < 0 {
				t.Fatal("notified before NotifyAfter had passed unwatched")
			}
			if got := len(w.pushes(t)); got != want {
				t.Fatalf("%d notifications, want %d", got, want)
			}
		})
	}
}

// actions notifies a question nobody watches and returns its actions.
func actions(tb testing.TB, w *world, session, request string) []notify.Action {
	tb.Helper()
	before := len(w.pushes(tb))
	w.s.Waiting(colorQuestion(session, request))
	w.clock.Advance(notifyAfter)
	got := w.pushes(tb)
	if len(got) != before+1 {
		tb.Fatalf("%d notifications, want %d", len(got), before+1)
	}
	return got[len(got)-1].Actions
}

func token(a notify.Action) string {
	u, _, _ := strings.Cut(a.URL, "?")
	return u[strings.LastIndex(u, "/")+1:]
}

// TestActionTokens: an action decides once, for its person, its session,
// its request and its own decision; a token replayed, used by another
// person, tampered with, used after its request was settled another way,
// or past its time decides nothing.
func TestActionTokens(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		use  func(w *world, acts []notify.Action) (notify.Claim, error)
		want error
	}{
		{"used once", func(w *world, acts []notify.Action) (notify.Claim, error) {
			return w.s.Redeem(token(acts[1]), "")
		}, nil},
		{"presented by its own person", func(w *world, acts []notify.Action) (notify.Claim, error) {
			return w.s.Redeem(token(acts[1]), "sebastian")
		}, nil},
		{"replayed", func(w *world, acts []notify.Action) (notify.Claim, error) {
			if _, err := w.s.Redeem(token(acts[1]), ""); err != nil {
				return notify.Claim{}, err
			}
			return w.s.Redeem(token(acts[1]), "")
		}, notify.ErrTokenGone},
		{"the other option after one was used", func(w *world, acts []notify.Action) (notify.Claim, error) {
			if _, err := w.s.Redeem(token(acts[1]), ""); err != nil {
				return notify.Claim{}, err
			}
			return w.s.Redeem(token(acts[0]), "")
		}, notify.ErrTokenGone},
		{"presented by another person", func(w *world, acts []notify.Action) (notify.Claim, error) {
			if _, err := w.s.Redeem(token(acts[1]), "petra"); !errors.Is(err, notify.ErrInvalidToken) {
				return notify.Claim{}, errors.New("another person's use was not refused")
			}
			// Refused without spending it: its person still can.
			return w.s.Redeem(token(acts[1]), "sebastian")
		}, nil},
		{"its body tampered with", func(w *world, acts []notify.Action) (notify.Claim, error) {
			body, sig, _ := strings.Cut(token(acts[1]), ".")
			raw, _ := base64.RawURLEncoding.DecodeString(body)
			raw = []byte(strings.Replace(string(raw), `"p":"sebastian"`, `"p":"petra"`, 1))
			return w.s.Redeem(base64.RawURLEncoding.EncodeToString(raw)+"."+sig, "")
		}, notify.ErrInvalidToken},
		{"its decision swapped for another's", func(w *world, acts []notify.Action) (notify.Claim, error) {
			body0, _, _ := strings.Cut(token(acts[0]), ".")
			_, sig1, _ := strings.Cut(token(acts[1]), ".")
			return w.s.Redeem(body0+"."+sig1, "")
		}, notify.ErrInvalidToken},
		{"made up", func(w *world, acts []notify.Action) (notify.Claim, error) {
			return w.s.Redeem("eyJwIjoic2ViYXN0aWFuIn0.c2lnbmF0dXJl", "")
		}, notify.ErrInvalidToken},
		{"answered another way", func(w *world, acts []notify.Action) (notify.Claim, error) {
			w.s.Settled("sebastian", "c", "r")
			return w.s.Redeem(token(acts[1]), "")
		}, notify.ErrTokenGone},
		{"its chat cleared", func(w *world, acts []notify.Action) (notify.Claim, error) {
			w.s.Settled("sebastian", "c", "")
			return w.s.Redeem(token(acts[1]), "")
		}, notify.ErrTokenGone},
		{"past its time", func(w *world, acts []notify.Action) (notify.Claim, error) {
			w.clock.Advance(10 * time.Minute)
			return w.s.Redeem(token(acts[1]), "")
		}, notify.ErrTokenGone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, nil)
			acts := actions(t, w, "c", "r")
			claim, err := tc.use(w, acts)
			if !errors.Is(err, tc.want) {
				t.Fatalf("redeem: %v, want %v", err, tc.want)
			}
			want := notify.Claim{Person: "sebastian", SessionID: "c", RequestID: "r",
				Decision: notify.Decision{Kind: "question", Question: "Which color?", Label: "Blue"}}
			if err == nil && claim != want {
				t.Fatalf("claim %+v, want %+v", claim, want)
			}
		})
	}
}

// TestTurnEnds: a turn's end nobody saw is notified, with the first
// line of the answer or the error's sentence; one someone saw, one
// interrupted, one that left a draft waiting (its own notification says
// more) and one a refusal already told of are not.
func TestTurnEnds(t *testing.T) {
	t.Parallel()
	end := relay.TurnEnded{Person: "sebastian", SessionID: "c", Title: "Notes", Outcome: "success", Answer: "\nAll three notes are tidy.\nDetails follow."}
	for _, tc := range []struct {
		name      string
		run       func(w *world)
		typ, body string
	}{
		{"nobody saw it", func(w *world) { w.s.TurnEnded(end) }, "done", "All three notes are tidy."},
		{"it failed", func(w *world) {
			e := end
			e.Outcome, e.Error, e.ErrorKind = "error", "The model is overloaded right now; please try again in a few minutes.", clientevent.KindOverloaded
			w.s.TurnEnded(e)
		}, "error", "The model is overloaded right now; please try again in a few minutes."},
		{"a client saw it", func(w *world) {
			defer w.s.Watch("sebastian", "c", "", true)()
			w.s.TurnEnded(end)
		}, "", ""},
		{"interrupted", func(w *world) {
			e := end
			e.Outcome = "interrupted"
			w.s.TurnEnded(e)
		}, "", ""},
		{"it left a draft waiting", func(w *world) {
			w.s.Waiting(relay.Waiting{Person: "sebastian", SessionID: "c", RequestID: "d", Kind: "draft", Tool: "post", What: "the post", Text: "Hello"})
			w.s.TurnEnded(end)
		}, "", ""},
		{"a refusal told of it", func(w *world) {
			w.s.Refused(relay.Refusal{Person: "sebastian", SessionID: "c", Title: "Notes", Kind: clientevent.KindBudget, Message: "The chat has spent its budget."})
			e := end
			e.Outcome, e.Error, e.ErrorKind = "error", "The chat has spent its budget.", clientevent.KindBudget
			w.s.TurnEnded(e)
		}, "refused", "The chat has spent its budget."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, nil)
			tc.run(w)
			got := w.pushes(t)
			if tc.typ == "" {
				if len(got) != 0 {
					t.Fatalf("notified: %+v", got)
				}
				return
			}
			if len(got) != 1 || got[0].Type != tc.typ || got[0].Body != tc.body || got[0].Title != "Notes" || len(got[0].Actions) != 0 {
				t.Fatalf("notified %+v, want one %s: %q", got, tc.typ, tc.body)
			}
		})
	}
}

// TestRefusedOnce: the same refusal is told once; a rate limit once per
// window, whichever chat it held up.
func TestRefusedOnce(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	until := time.Date(2026, 3, 2, 17, 0, 0, 0, time.UTC)
	for _, session := range []string{"a", "a", "b"} {
		w.s.Refused(relay.Refusal{Person: "sebastian", SessionID: session, Kind: clientevent.KindRateLimited, Message: "Rate limited.", Until: until})
	}
	w.s.Refused(relay.Refusal{Person: "sebastian", SessionID: "a", Kind: clientevent.KindBudget, Message: "Spent."})
	w.s.Refused(relay.Refusal{Person: "sebastian", SessionID: "a", Kind: clientevent.KindBudget, Message: "Spent."})
	w.s.Refused(relay.Refusal{Person: "sebastian", SessionID: "a", Kind: clientevent.KindRateLimited, Message: "Rate limited.", Until: until.Add(time.Hour)})
	var bodies []string
	for _, p := range w.pushes(t) {
		if p.Type != "refused" {
			t.Fatalf("type %q", p.Type)
		}
		bodies = append(bodies, p.Body)
	}
	slices.Sort(bodies)
	if strings.Join(bodies, "|") != "Rate limited.|Rate limited.|Spent." {
		t.Fatalf("notified %q", bodies)
	}
}

// TestQuietHours: during a person's quiet hours what needs no answer
// waits until they end (and then goes out unless the person has seen
// its chat meanwhile); what waits for an answer goes out at once.
func TestQuietHours(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	// 12:00 UTC is 13:00 in Berlin: quiet until 14:30 there.
	if err := w.s.SetPreferences("sebastian", notify.Preferences{QuietHours: &notify.QuietHours{From: "12:30", To: "14:30", TZ: "Europe/Berlin"}}); err != nil {
		t.Fatal(err)
	}
	w.s.TurnEnded(relay.TurnEnded{Person: "sebastian", SessionID: "a", Title: "A", Outcome: "success", Answer: "Done with A."})
	w.s.TurnEnded(relay.TurnEnded{Person: "sebastian", SessionID: "b", Title: "B", Outcome: "success", Answer: "Done with B."})
	w.s.Waiting(colorQuestion("c", "r"))
	w.clock.Advance(notifyAfter)
	if got := w.pushes(t); len(got) != 1 || got[0].Type != "question" {
		t.Fatalf("during quiet hours: %+v", got)
	}
	// Chat b is seen before the quiet hours end.
	defer w.s.Watch("sebastian", "b", "", true)()
	w.clock.Advance(89*time.Minute - notifyAfter)
	if got := w.pushes(t); len(got) != 1 {
		t.Fatalf("released early: %+v", got)
	}
	w.clock.Advance(time.Minute)
	got := w.pushes(t)
	if len(got) != 2 || got[1].Body != "Done with A." {
		t.Fatalf("after the quiet hours: %+v", got)
	}
}

func TestQuietHoursSpan(t *testing.T) {
	t.Parallel()
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	night := &notify.QuietHours{From: "22:00", To: "07:00", TZ: "Europe/Berlin"}
	for _, tc := range []struct {
		name  string
		now   time.Time
		quiet bool
		until time.Time
	}{
		{"evening", time.Date(2026, 3, 2, 21, 59, 0, 0, berlin), false, time.Time{}},
		{"night", time.Date(2026, 3, 2, 23, 30, 0, 0, berlin), true, time.Date(2026, 3, 3, 7, 0, 0, 0, berlin)},
		{"early morning", time.Date(2026, 3, 3, 6, 59, 0, 0, berlin), true, time.Date(2026, 3, 3, 7, 0, 0, 0, berlin)},
		{"morning", time.Date(2026, 3, 3, 7, 0, 0, 0, berlin), false, time.Time{}},
		// The night the clocks go forward is an hour shorter.
		{"across a clock change", time.Date(2026, 3, 28, 23, 0, 0, 0, berlin), true, time.Date(2026, 3, 29, 7, 0, 0, 0, berlin)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			until, quiet := notify.QuietUntil(night, tc.now.UTC())
			if quiet != tc.quiet || !until.Equal(tc.until) {
				t.Fatalf("quiet %v until %v, want %v until %v", quiet, until, tc.quiet, tc.until)
			}
		})
	}
}

func TestPreferencesCheck(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		json string
		ok   bool
	}{
		{`{}`, true},
		{`{"events":[]}`, true},
		{`{"events":["question","done"],"quiet_hours":{"from":"22:00","to":"07:00","tz":"Europe/Berlin"}}`, true},
		{`{"quiet_hours":{"from":"22:00","to":"07:00"}}`, true},
		{`{"events":["questions"]}`, false},
		{`{"quiet_hours":{"from":"10pm","to":"07:00"}}`, false},
		{`{"quiet_hours":{"from":"22:00","to":"22:00"}}`, false},
		{`{"quiet_hours":{"from":"22:00","to":"07:00","tz":"Mars/Olympus"}}`, false},
	} {
		t.Run(tc.json, func(t *testing.T) {
			var p notify.Preferences
			if err := json.Unmarshal([]byte(tc.json), &p); err != nil {
				t.Fatal(err)
			}
			err := p.Check()
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, notify.ErrBadSettings)) {
				t.Fatalf("Check() = %v, want ok %v", err, tc.ok)
			}
		})
	}
}
