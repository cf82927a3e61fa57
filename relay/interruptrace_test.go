package relay_test

import (
	"context"
	"errors"
	"testing"

	"github.com/majorhq/major/relay"
	"github.com/majorhq/major/relay/relaytest"
	"github.com/majorhq/major/supervisor"
)

// An interrupt that finds the CLI running no turn ends only a turn the
// CLI lost, never the next one. A person interrupts just as the running
// turn ends by itself: the CLI answers that no turn runs, and before the
// chat looks at its own view of the turn, the message queued behind
// starts its turn on the CLI. The chat then ends that new turn as lost
// and interrupted: its client reads "interrupted" while the CLI runs the
// message with the model, the turn's answer is dropped as output outside
// a turn, and the next message finds the CLI busy.
func TestInterruptAsTheTurnEndsLeavesTheNextTurnAlone(t *testing.T) {
	t.Parallel()
	sessions, fakes := relaytest.NewRegistry(t, relay.RegistryConfig{})
	chat, err := sessions.GetOrCreate("", "sebastian")
	if err != nil {
		t.Fatal(err)
	}
	first, err := sessions.Submit(chat, "one", relay.SubmitOptions{Stream: true})
	if err != nil || started(t, first) != nil {
		t.Fatalf("first message: %v %v", err, first.Err())
	}
	second, err := sessions.Submit(chat, "two", relay.SubmitOptions{Stream: true})
	if err != nil || !second.Queued() {
		t.Fatalf("second message: %v (queued %v)", err, second.Queued())
	}
	cli := fakes.CLI(chat.ID)
	cli.InterruptFunc = func(context.Context) error {
		// The turn ends by itself as the interrupt arrives: the CLI
		// runs no turn when it looks, and says so only once the queued
		// message has started its turn.
		cli.Reply("first answer")
		<-second.Started()
		return supervisor.ErrNotRunning
	}
	// Either answer is right: the turn it was meant for ended by itself.
	if err := chat.Interrupt(context.Background()); err != nil && !errors.Is(err, supervisor.ErrNotRunning) {
		t.Fatalf("interrupt: %v", err)
	}
	if second.Err() != nil {
		t.Fatalf("the second message did not start: %v", second.Err())
	}
	turn := second.Turn()
	for _, ev := range chat.Stream().Events(second.StartSeq()) {
		if ev.Turn == turn && ev.Terminal {
			t.Fatalf("the interrupt ended the next turn, which the CLI runs: %s (the CLI got %q)", ev.Line, cli.Sent())
		}
	}
	cli.Reply("second answer")
	if end := ended(t, chat, turn); end.Type != "done" {
		t.Fatalf("the second turn ended with %s", end.Line)
	}
	checkOneEnd(t, chat, 2)
}
