package relay_test

import (
	"context"
	"testing"

	"github.com/majorhq/major/relay"
	"github.com/majorhq/major/relay/relaytest"
	"github.com/majorhq/major/supervisor"
)

// A chat reports its CLI's state, and clearing it closes the CLI.
func TestChatStateAndClearWithFakeCLI(t *testing.T) {
	t.Parallel()
	sessions, fakes := relaytest.NewRegistry(t, relay.RegistryConfig{})
	chat, err := sessions.GetOrCreate("", "sebastian")
	if err != nil {
		t.Fatal(err)
	}
	fake := fakes.CLI(chat.ID)
	if got := chat.Info().State; got != string(supervisor.StateIdle) {
		t.Fatalf("state before a turn: %s", got)
	}
	if err := sessions.Send(context.Background(), chat, "hello"); err != nil {
		t.Fatal(err)
	}
	if got := chat.Info().State; got != string(supervisor.StateRunning) {
		t.Fatalf("state during a turn: %s", got)
	}
	if !fake.Reply("hi there") {
		t.Fatal("no turn was running")
	}
	hist := chat.History()
	if len(hist) != 2 || hist[0].Content != "hello" || hist[1].Content != "hi there" {
		t.Fatalf("history %v", hist)
	}
	closed := false
	fake.CloseFunc = func() error { closed = true; return nil }
	if !sessions.Clear(chat.ID, "sebastian") || !closed {
		t.Fatalf("clear: closed=%v", closed)
	}
}
