package relay_test

import (
	"context"
	"slices"
	"testing"

	"github.com/majorhq/major/relay"
	"github.com/majorhq/major/relay/relaytest"
	"github.com/majorhq/major/supervisor"
)

// A rewind holds its session from the dry run to the rewound event: a
// message sent while the rewind waits (here in the CLI's dry run, as it
// may wait for git) queues behind it instead of starting a turn under it,
// the rewind completes, and the message then runs.
func TestRewindHoldsTheSession(t *testing.T) {
	t.Parallel()
	sessions, chat, f, inDryRun, release := rewindWaitsInDryRun(t)

	type result struct {
		res relay.RewindResult
		err error
	}
	rewound := make(chan result, 1)
	go func() {
		res, err := sessions.Rewind(context.Background(), chat, relay.RewindRequest{MessageID: "turn-1-user", Files: true, Conversation: true})
		rewound <- result{res, err}
	}()
	<-inDryRun
	b := submit(t, sessions, chat, "and now?")
	if !b.Queued() || slices.Contains(f.Sent(), "and now?") {
		t.Fatal("a message sent during the rewind did not wait for it")
	}
	close(release)
	if r := <-rewound; r.err != nil || len(r.res.Files) != 1 {
		t.Fatalf("rewind: %+v, %v", r.res, r.err)
	}
	if err := started(t, b); err != nil {
		t.Fatalf("the message after the rewind: %v", err)
	}
	f.Reply("fresh start")
	ended(t, chat, b.Turn())
	var order []string
	for _, ev := range chat.Stream().Events(0) {
		if ev.Type == "rewound" || ev.Type == "turn_start" {
			order = append(order, ev.Type)
		}
	}
	if !slices.Equal(order, []string{"turn_start", "rewound", "turn_start"}) {
		t.Fatalf("events in order %v, want the rewind before the next turn", order)
	}
	if got := f.ResumedAt(); len(got) != 1 {
		t.Fatalf("the conversation resumed at %q", got)
	}
	checkOneEnd(t, chat, 2)
}

// A fork holds the original until the new session is made: a message
// sent to the original meanwhile waits and then runs there, and the fork
// has the original's history as it was, with no turn open.
func TestForkHoldsTheOriginal(t *testing.T) {
	t.Parallel()
	launching, release := make(chan struct{}), make(chan struct{})
	sessions, fakes := relaytest.NewRegistry(t, relay.RegistryConfig{})
	fakes.New = func(p relay.SessionParams) *relaytest.CLI {
		f := &relaytest.CLI{CLISessionIDFunc: func() string { return "cli-conversation" }}
		if p.Fork {
			close(launching)
			<-release
		}
		return f
	}
	chat, err := sessions.GetOrCreate("", "sebastian")
	if err != nil {
		t.Fatal(err)
	}
	f := fakes.CLI(chat.ID)
	a := submit(t, sessions, chat, "remember 42")
	started(t, a)
	f.Reply("noted")
	ended(t, chat, a.Turn())

	forked := make(chan *relay.Session, 1)
	go func() {
		fork, err := sessions.Fork(chat.ID, "sebastian")
		if err != nil {
			t.Errorf("fork: %v", err)
		}
		forked <- fork
	}()
	<-launching
	b := submit(t, sessions, chat, "what was it?")
	if !b.Queued() || slices.Contains(f.Sent(), "what was it?") {
		t.Fatal("a message sent during the fork did not wait for it")
	}
	close(release)
	fork := <-forked
	if fork == nil {
		t.FailNow()
	}
	if err := started(t, b); err != nil {
		t.Fatalf("the message after the fork: %v", err)
	}
	f.Reply("42")
	ended(t, chat, b.Turn())
	if h := fork.History(); len(h) != 2 || h[0].Content != "remember 42" || fork.Stream().TurnOpen() {
		t.Fatalf("the fork's history %+v, a turn open: %v", h, fork.Stream().TurnOpen())
	}
	checkOneEnd(t, chat, 2)
}

// While a rewind holds the session, another rewind, a fork and a terminal
// are refused; a message waits.
func TestHoldRefusesTheOthers(t *testing.T) {
	t.Parallel()
	sessions, chat, f, inDryRun, release := rewindWaitsInDryRun(t)
	done := make(chan error, 1)
	go func() {
		_, err := sessions.Rewind(context.Background(), chat, relay.RewindRequest{MessageID: "turn-1-user", Files: true, DryRun: true})
		done <- err
	}()
	<-inDryRun
	if _, err := sessions.Rewind(context.Background(), chat, relay.RewindRequest{MessageID: "turn-1-user", Conversation: true}); err != supervisor.ErrBusy {
		t.Errorf("a second rewind: %v, want ErrBusy", err)
	}
	if _, err := sessions.Fork(chat.ID, "sebastian"); err != supervisor.ErrBusy {
		t.Errorf("a fork: %v, want ErrBusy", err)
	}
	if _, err := chat.OpenTerminal(); err != supervisor.ErrBusy {
		t.Errorf("a terminal: %v, want ErrBusy", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	b := submit(t, sessions, chat, "next")
	if err := started(t, b); err != nil || b.Queued() {
		t.Fatalf("a message after the dry run: queued %v, %v", b.Queued(), err)
	}
	f.Reply("ok")
	ended(t, chat, b.Turn())
}

// rewindWaitsInDryRun makes a session of sebastian's with one turn ended,
// whose CLI's dry run of a rewind closes inDryRun and then waits until
// release is closed.
func rewindWaitsInDryRun(tb testing.TB) (sessions *relay.Registry, chat *relay.Session, f *relaytest.CLI, inDryRun, release chan struct{}) {
	tb.Helper()
	inDryRun, release = make(chan struct{}), make(chan struct{})
	sessions, fakes := relaytest.NewRegistry(tb, relay.RegistryConfig{
		VetRewind: func(person string, files []string) ([]string, error) { return files, nil },
	})
	chat, err := sessions.GetOrCreate("", "sebastian")
	if err != nil {
		tb.Fatal(err)
	}
	f = fakes.CLI(chat.ID)
	f.RewindFilesFunc = func(ctx context.Context, messageID string, dryRun bool) (supervisor.RewindResult, error) {
		if dryRun {
			close(inDryRun)
			<-release
		}
		return supervisor.RewindResult{CanRewind: true, FilesChanged: []string{"notes.md"}}, nil
	}
	a := submit(tb, sessions, chat, "write my notes")
	started(tb, a)
	f.Reply("written")
	ended(tb, chat, a.Turn())
	return sessions, chat, f, inDryRun, release
}
