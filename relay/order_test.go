package relay_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/majorhq/major/relay"
	"github.com/majorhq/major/relay/relaytest"
)

// A turn's prompts and drafts come from the CLI's requests, not from its
// output, but they belong to the turn. While the turn before still waits
// for its end hook (the vault's commit), the next turn can already run on
// the CLI; its prompts then wait too, behind that end and their own
// turn's start, so no client sees a prompt of a turn that has not started
// (or a draft declined after the next one was made).
func TestPromptsWaitBehindThePreviousTurnsEnd(t *testing.T) {
	t.Parallel()
	const input = `{"file_path":"/vault/post.md","content":"hello"}`
	// setup starts a chat whose first turn-end hook waits for release.
	setup := func(t *testing.T) (*relay.Registry, *relay.Session, *relaytest.CLI, chan struct{}, *atomic.Int32) {
		release := make(chan struct{})
		var hooks atomic.Int32
		sessions, fakes := relaytest.NewRegistry(t, relay.RegistryConfig{
			TurnEnd: func(ctx context.Context, person, id string) string {
				if hooks.Add(1) == 1 {
					<-release
				}
				return ""
			},
		})
		fakes.Policy = &relay.AskPolicy{
			Timeout:       time.Minute,
			Ask:           func(tool string, _ json.RawMessage) bool { return tool == "Write" },
			ConfirmInChat: func(tool string) bool { return tool == "Write" },
		}
		chat, err := sessions.GetOrCreate("", "sebastian")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			select {
			case <-release:
			default:
				close(release)
			}
		})
		return sessions, chat, fakes.CLI(chat.ID), release, &hooks
	}
	send := func(t *testing.T, sessions *relay.Registry, chat *relay.Session, text string) {
		t.Helper()
		if err := sessions.Send(context.Background(), chat, text); err != nil {
			t.Fatalf("send %q: %v", text, err)
		}
	}
	// secondTurnRuns waits until the second message went to the CLI while
	// the first turn's hook still runs.
	secondTurnRuns := func(t *testing.T, cli *relaytest.CLI, hooks *atomic.Int32) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); len(cli.Sent()) < 2 || hooks.Load() == 0; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the second message did not go to the CLI while the hook ran")
			}
		}
	}
	types := func(t *testing.T, chat *relay.Session, dones int) string {
		t.Helper()
		var got []string
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			got = got[:0]
			n := 0
			for _, ev := range chat.Stream().Events(0) {
				switch ev.Type {
				case "turn_start", "done", "permission", "permission_answered", "draft", "draft_answered":
					got = append(got, ev.Type)
				}
				if ev.Type == "done" {
					n++
				}
			}
			if n >= dones {
				return strings.Join(got, ",")
			}
			if time.Now().After(deadline) {
				t.Fatalf("events so far: %s", strings.Join(got, ","))
			}
		}
	}

	t.Run("a permission prompt", func(t *testing.T) {
		sessions, chat, cli, release, hooks := setup(t)
		defer chat.AttachInteractive()()
		send(t, sessions, chat, "one")
		cli.Reply("done one")
		send(t, sessions, chat, "two")
		secondTurnRuns(t, cli, hooks)
		asked := make(chan struct{}, 1)
		cli.SetWaitingFunc = func(waiting bool) {
			if waiting {
				asked <- struct{}{}
			}
		}
		allowed := make(chan bool, 1)
		go func() {
			res, err := cli.UseTool(context.Background(), "Write", json.RawMessage(input))
			allowed <- err == nil && res.Allow
		}()
		<-asked
		close(release)
		var id string
		for deadline := time.Now().Add(30 * time.Second); id == ""; time.Sleep(5 * time.Millisecond) {
			for _, ev := range chat.PendingEvents() {
				var p struct {
					RequestID string `json:"request_id"`
				}
				_ = json.Unmarshal(ev.Line, &p)
				id = p.RequestID
			}
			if time.Now().After(deadline) {
				t.Fatal("the prompt never showed")
			}
		}
		if err := chat.Answer("permission", id, relay.Answer{Allow: true}); err != nil {
			t.Fatal(err)
		}
		if !<-allowed {
			t.Fatal("the allowed call did not run")
		}
		cli.Reply("done two")
		want := "turn_start,done,turn_start,permission,permission_answered,done"
		if got := types(t, chat, 2); got != want {
			t.Fatalf("events:\n got %s\nwant %s", got, want)
		}
	})

	t.Run("a draft", func(t *testing.T) {
		// No client can answer: each call is held back as a draft.
		sessions, chat, cli, release, hooks := setup(t)
		send(t, sessions, chat, "one")
		if res, err := cli.UseTool(context.Background(), "Write", json.RawMessage(input)); err != nil || res.Allow {
			t.Fatalf("first call: %+v %v", res, err)
		}
		cli.Reply("asked to confirm")
		send(t, sessions, chat, "something else")
		secondTurnRuns(t, cli, hooks)
		if res, err := cli.UseTool(context.Background(), "Write", json.RawMessage(input)); err != nil || res.Allow {
			t.Fatalf("second call: %+v %v", res, err)
		}
		cli.Reply("asked again")
		close(release)
		// The second message declined the first draft as its turn started;
		// the second draft comes after.
		want := "turn_start,draft,done,turn_start,draft_answered,draft,done"
		if got := types(t, chat, 2); got != want {
			t.Fatalf("events:\n got %s\nwant %s", got, want)
		}
	})
}
