package relay_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/majorhq/major/clientevent"
	"github.com/majorhq/major/relay"
	"github.com/majorhq/major/relay/relaytest"
	"github.com/majorhq/major/supervisor"
	"github.com/majorhq/major/usage"
)

// notices records what a registry tells its Notifier, in order.
type notices struct {
	mu      sync.Mutex
	log     []string
	waiting []relay.Waiting
	ended   []relay.TurnEnded
	refused []relay.Refusal
}

func (n *notices) Waiting(w relay.Waiting) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.waiting = append(n.waiting, w)
	n.log = append(n.log, "waiting "+w.Kind+" "+w.RequestID)
}

func (n *notices) Settled(person, session, request string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.log = append(n.log, "settled "+request)
}

func (n *notices) TurnEnded(e relay.TurnEnded) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.ended = append(n.ended, e)
	n.log = append(n.log, "ended "+e.Outcome)
}

func (n *notices) Refused(r relay.Refusal) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.refused = append(n.refused, r)
	n.log = append(n.log, "refused "+r.Kind)
}

func (n *notices) lines() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.log...)
}

// lastWaiting waits until the Notifier has heard of count requests and
// returns the last.
func (n *notices) lastWaiting(tb testing.TB, count int) relay.Waiting {
	tb.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		n.mu.Lock()
		if len(n.waiting) >= count {
			w := n.waiting[count-1]
			n.mu.Unlock()
			return w
		}
		n.mu.Unlock()
		if time.Now().After(deadline) {
			tb.Fatalf("the notifier heard of %d requests, want %d: %v", len(n.waiting), count, n.lines())
		}
	}
}

var _ relay.Notifier = (*notices)(nil)

// TestNotifierHearsTheSessionCore: the session core tells its Notifier of
// each question, permission prompt and draft as it starts to wait, with
// what the person must know (the chat's title, the question and its
// options, the exact words a post would publish) and no server path; of
// each as it stops waiting, however it ends; of every turn's end with its
// answer or error; of a message refused for a budget; and of a chat
// cleared.
func TestNotifierHearsTheSessionCore(t *testing.T) {
	t.Parallel()
	n := &notices{}
	reg, l := relaytest.NewRegistry(t, relay.RegistryConfig{Notifier: n, Metered: true,
		ServerPaths: clientevent.ServerPaths{VaultRoot: "/srv/vault"},
		Limits:      func(string) relay.Limits { return relay.Limits{SessionUSD: 1} }})
	l.Policy = &relay.AskPolicy{
		Ask:           func(tool string, _ json.RawMessage) bool { return tool == "post" || tool == "Write" },
		ConfirmInChat: func(tool string) bool { return tool == "post" },
		Describe:      func(string, json.RawMessage) string { return "the post" },
	}
	chat, err := reg.GetOrCreate("", "sebastian")
	if err != nil {
		t.Fatal(err)
	}
	cli := l.CLI(chat.ID)
	turn := func(t *testing.T, message string) {
		t.Helper()
		tk, err := reg.Submit(chat, message, relay.SubmitOptions{})
		if err != nil {
			t.Fatal(err)
		}
		<-tk.Started()
		if tk.Err() != nil {
			t.Fatal(tk.Err())
		}
	}
	use := func(tool string, input any) <-chan supervisor.PermissionResult {
		out := make(chan supervisor.PermissionResult, 1)
		go func() {
			res, err := cli.UseTool(context.Background(), tool, input)
			if err != nil {
				t.Error(err)
			}
			out <- res
		}()
		return out
	}
	step := func(name string, f func(t *testing.T)) {
		if !t.Run(name, f) {
			t.FailNow()
		}
	}

	detach := chat.AttachInteractive()
	step("a question", func(t *testing.T) {
		turn(t, "Tidy /srv/vault/sebastian/notes please")
		res := use("AskUserQuestion", map[string]any{"questions": []any{map[string]any{
			"question": "Keep /srv/vault/sebastian/todo.md?", "header": "Keep", "multiSelect": false,
			"options": []any{map[string]any{"label": "Keep", "description": "as it is"}, map[string]any{"label": "Drop", "description": ""}},
		}}})
		w := n.lastWaiting(t, 1)
		if w.Kind != "question" || w.Person != "sebastian" || w.SessionID != chat.ID || w.RequestID == "" || w.Expires.IsZero() {
			t.Fatalf("waiting %+v", w)
		}
		if w.Title != "Tidy notes please" || len(w.Questions) != 1 || w.Questions[0].Question != "Keep todo.md?" ||
			len(w.Questions[0].Options) != 2 || w.Questions[0].Options[1].Label != "Drop" {
			t.Fatalf("what the person would read: %q %+v", w.Title, w.Questions)
		}
		if err := chat.Answer("question", w.RequestID, relay.Answer{Answers: map[string]string{"Keep todo.md?": "Drop"}}); err != nil {
			t.Fatal(err)
		}
		if r := <-res; !r.Allow {
			t.Fatalf("the answer did not reach the CLI: %+v", r)
		}
		cli.Reply("Dropped it.\nAnything else?")
		ended := n.ended[len(n.ended)-1]
		if ended.Outcome != "success" || ended.Answer != "Dropped it.\nAnything else?" || ended.Title != "Tidy notes please" {
			t.Fatalf("turn end %+v", ended)
		}
		want := []string{"waiting question " + w.RequestID, "settled " + w.RequestID, "ended success"}
		if got := n.lines(); strings.Join(got, "|") != strings.Join(want, "|") {
			t.Fatalf("heard %q, want %q", got, want)
		}
	})

	step("a permission that times out is settled", func(t *testing.T) {
		turn(t, "write it")
		res := use("Write", map[string]any{"file_path": "/srv/vault/sebastian/a.md", "content": "x"})
		w := n.lastWaiting(t, 2)
		if w.Kind != "permission" || w.Tool != "Write" || strings.Contains(string(w.Input), "/srv/vault") {
			t.Fatalf("waiting %+v (%s)", w, w.Input)
		}
		if err := cli.Interrupt(context.Background()); err != nil {
			t.Fatal(err)
		}
		<-res
		lines := n.lines()
		if !strings.Contains(strings.Join(lines, "|"), "settled "+w.RequestID) || lines[len(lines)-1] != "ended interrupted" {
			t.Fatalf("heard %q", lines)
		}
	})
	detach()

	step("a draft, answered on a card", func(t *testing.T) {
		turn(t, "post it")
		if r := <-use("post", map[string]any{"text": "Exact words, kept"}); r.Allow {
			t.Fatal("a post ran with nobody to approve it")
		}
		w := n.lastWaiting(t, 3)
		if w.Kind != "draft" || w.Text != "Exact words, kept" || w.What != "the post" || w.Tool != "post" || !w.Expires.IsZero() {
			t.Fatalf("waiting %+v", w)
		}
		cli.Reply("")
		if err := chat.Answer("permission", w.RequestID, relay.Answer{Allow: true}); err != nil {
			t.Fatal(err)
		}
		if lines := n.lines(); lines[len(lines)-1] != "settled "+w.RequestID {
			t.Fatalf("heard %q", lines)
		}
	})

	step("a refused message", func(t *testing.T) {
		reg.Charge("sebastian", chat.ID, time.Now(), usage.Day{CostUSD: 2})
		var over *relay.BudgetError
		if err := reg.Admit(chat, "more"); !errors.As(err, &over) {
			t.Fatalf("admitted over the budget: %v", err)
		}
		r := n.refused[len(n.refused)-1]
		if r.Kind != clientevent.KindBudget || r.SessionID != chat.ID || r.Message != over.Error() {
			t.Fatalf("refusal %+v", r)
		}
	})

	step("a cleared chat settles everything", func(t *testing.T) {
		reg.Clear(chat.ID, "sebastian")
		if lines := n.lines(); lines[len(lines)-1] != "settled " {
			t.Fatalf("heard %q", lines)
		}
	})
}
