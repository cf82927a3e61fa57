package supervisor_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/majorhq/major/clitest"
	"github.com/majorhq/major/supervisor"
)

// TestPriorityOnThePinnedCLI holds the pinned CLI to what steering relies
// on, through the real protocol: during a turn of three tool calls, a
// second message written after the first call with priority "next" goes
// into the running turn (one result, whose model heard it); "later" runs
// as a turn of its own afterwards; "now" stops the turn and runs at once
// in a turn of its own. The CLI's command_lifecycle messages name the
// message as it goes in.
func TestPriorityOnThePinnedCLI(t *testing.T) {
	t.Parallel()
	cases := []struct {
		priority supervisor.Priority
		// results are what the results' texts hold, in order ("" for a
		// turn the message stopped).
		results []string
	}{
		{supervisor.PriorityNext, []string{"STEPS DONE; heard: The user sent a new message while you were working:\nalso bananas"}},
		{supervisor.PriorityLater, []string{"STEPS DONE; heard: ", "You said: also bananas"}},
		{supervisor.PriorityNow, []string{"", "also bananas"}},
	}
	for _, tc := range cases {
		t.Run(string(tc.priority), func(t *testing.T) {
			t.Parallel()
			env := clitest.New(t, nil)
			spec := testSpec(env)
			msgs := make(chan *supervisor.Message, 1024)
			proc, err := supervisor.StartProcess(supervisor.ProcessConfig{
				Path: spec.Binary, Args: spec.Args(""), Dir: env.Vault("sebastian"), Env: spec.Env,
				OnMessage: func(m *supervisor.Message) { msgs <- m },
				Logger:    zerolog.Nop(),
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = proc.Close() })
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if _, err := proc.Request(ctx, "initialize", map[string]any{"hooks": map[string]any{}}); err != nil {
				t.Fatal(err)
			}
			second := uuid.NewString()
			if err := proc.SendUser("[[steps 3 400]]", nil, uuid.NewString(), supervisor.PriorityLater); err != nil {
				t.Fatal(err)
			}
			var results []*supervisor.Message
			var states []string
			sent := false
			timeout := time.NewTimer(time.Minute)
			defer timeout.Stop()
			// Until the second message's turn, its own or the one it went
			// into, has completed, and as many results came as expected:
			// with every message done, the CLI starts no further turn.
			for len(states) == 0 || states[len(states)-1] != "completed" || len(results) < len(tc.results) {
				select {
				case m := <-msgs:
					switch {
					case !sent && m.Type == "assistant" && strings.Contains(string(m.Raw), `"tool_use"`):
						if err := proc.SendUser("also bananas", nil, second, tc.priority); err != nil {
							t.Fatal(err)
						}
						sent = true
					case m.Type == "result":
						results = append(results, m)
					case m.Type == "command_lifecycle" && m.CommandUUID == second:
						states = append(states, m.State)
					}
				case <-timeout.C:
					t.Fatalf("the second message did not complete; results %d, its states %v", len(results), states)
				}
			}
			if len(results) != len(tc.results) {
				t.Fatalf("%d results, want %d", len(results), len(tc.results))
			}
			for i, want := range tc.results {
				got := results[i].Result
				if want == "" && !strings.HasPrefix(results[i].TerminalReason, "aborted") {
					t.Errorf("result %d: %q (%s), want the stopped turn's", i, got, results[i].TerminalReason)
				}
				if want != "" && !strings.Contains(got, want) {
					t.Errorf("result %d: %q, want %q", i, got, want)
				}
			}
			if states[0] != "queued" || !strings.Contains(strings.Join(states, " "), "started") {
				t.Errorf("the second message's lifecycle %v: want queued, then started", states)
			}
		})
	}
}

// TestSteerThroughCLI gives a message to a session's running turn through
// the real CLI. It proves that:
//   - a message given during a turn of tool calls goes into that turn
//     (EventSteered, then one result and one turn end; the model heard
//     it), and so does one given while the turn's process still starts;
//   - one given while the model writes the turn's last answer runs right
//     after it as part of the same turn (two results, one turn end);
//   - one given before an interrupt never reaches the model: the turn
//     ends interrupted, EventSteerDropped says so, and it does not run
//     afterwards; one the CLI is told to withdraw ends the same way, and
//     the turn with its one result;
//   - with no turn running there is nothing to steer (ErrNotRunning).
func TestSteerThroughCLI(t *testing.T) {
	t.Parallel()
	kinds := func(rec *clitest.Recorder, id string) (steered, dropped, ends, results int) {
		for _, ev := range rec.Events() {
			switch {
			case ev.Kind == supervisor.EventSteered && ev.MessageID == id:
				steered++
			case ev.Kind == supervisor.EventSteerDropped && ev.MessageID == id:
				dropped++
			case ev.Kind == supervisor.EventTurnEnd:
				ends++
			case ev.Kind == supervisor.EventCLI && ev.Msg.Type == "result":
				results++
			}
		}
		return
	}
	// waitCLI waits until the session's CLI wrote a message for which
	// pred holds.
	waitCLI := func(t *testing.T, rec *clitest.Recorder, pred func(*supervisor.Message) bool) {
		t.Helper()
		waitFor(t, time.Minute, func() bool {
			return rec.Count(func(ev supervisor.Event) bool { return ev.Kind == supervisor.EventCLI && pred(ev.Msg) }) > 0
		})
	}
	streaming := func(m *supervisor.Message) bool {
		return m.Type == "stream_event" && m.Event != nil && m.Event.Type == "message_start"
	}
	ticked := func(m *supervisor.Message) bool {
		return m.Type == "stream_event" && m.Event != nil && m.Event.Delta != nil && strings.Contains(m.Event.Delta.Text, "tick")
	}
	cases := []struct {
		name string
		run  func(t *testing.T, s *supervisor.CLI, rec *clitest.Recorder)
	}{
		{"into a turn of tool calls", func(t *testing.T, s *supervisor.CLI, rec *clitest.Recorder) {
			send(t, s, "[[steps 3 2000]]")
			waitCLI(t, rec, streaming)
			id := uuid.NewString()
			if err := s.Steer(context.Background(), id, "also bananas"); err != nil {
				t.Fatal(err)
			}
			if end := rec.WaitEnd(t, time.Minute); end.Err != nil || end.Interrupted {
				t.Fatalf("turn end %+v", end)
			}
			if got := rec.Text(); !strings.Contains(got, "STEPS DONE; heard: ") || !strings.Contains(got, "also bananas") {
				t.Fatalf("the model did not hear the message in its turn: %q", got)
			}
			if steered, dropped, ends, results := kinds(rec, id); steered != 1 || dropped != 0 || ends != 1 || results != 1 {
				t.Fatalf("steered %d, dropped %d, turn ends %d, results %d; want 1, 0, 1, 1", steered, dropped, ends, results)
			}
		}},
		{"while the turn's process starts", func(t *testing.T, s *supervisor.CLI, rec *clitest.Recorder) {
			sent := make(chan error, 1)
			go func() { sent <- s.Send(context.Background(), "[[steps 2 400]]") }()
			waitFor(t, time.Minute, func() bool { return s.State() != supervisor.StateIdle })
			id := uuid.NewString()
			if err := s.Steer(context.Background(), id, "early words"); err != nil {
				t.Fatal(err)
			}
			if err := <-sent; err != nil {
				t.Fatal(err)
			}
			rec.WaitEnd(t, time.Minute)
			if got := rec.Text(); !strings.Contains(got, "early words") {
				t.Fatalf("the model did not hear the message: %q", got)
			}
			if steered, _, ends, _ := kinds(rec, id); steered != 1 || ends != 1 {
				t.Fatalf("steered %d, turn ends %d", steered, ends)
			}
		}},
		{"while the last answer streams", func(t *testing.T, s *supervisor.CLI, rec *clitest.Recorder) {
			send(t, s, "[[slow 60 100]]")
			waitCLI(t, rec, ticked)
			id := uuid.NewString()
			if err := s.Steer(context.Background(), id, "[[say steered answer]]"); err != nil {
				t.Fatal(err)
			}
			if end := rec.WaitEnd(t, time.Minute); end.Err != nil || end.Msg == nil || end.Msg.IsError {
				t.Fatalf("turn end %+v", end)
			}
			if got := rec.Text(); !strings.HasPrefix(got, "tick ") || !strings.HasSuffix(got, "steered answer") {
				t.Fatalf("turn text %q: want the ticks, then the steered answer", got)
			}
			if steered, dropped, ends, results := kinds(rec, id); steered != 1 || dropped != 0 || ends != 1 || results != 2 {
				t.Fatalf("steered %d, dropped %d, turn ends %d, results %d; want 1, 0, 1, 2", steered, dropped, ends, results)
			}
		}},
		{"withdrawn before it went in", func(t *testing.T, s *supervisor.CLI, rec *clitest.Recorder) {
			send(t, s, "[[slow 60 100]]")
			waitCLI(t, rec, ticked)
			id := uuid.NewString()
			if err := s.Steer(context.Background(), id, "[[say withdrawn]]"); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := s.Control(ctx, "cancel_async_message", map[string]any{"message_uuid": id}); err != nil {
				t.Fatal(err)
			}
			if end := rec.WaitEnd(t, time.Minute); end.Err != nil || end.Msg == nil {
				t.Fatalf("turn end %+v", end)
			}
			if got := rec.Text(); strings.Contains(got, "withdrawn") {
				t.Fatalf("the withdrawn message ran: %q", got)
			}
			if steered, dropped, ends, results := kinds(rec, id); steered != 0 || dropped != 1 || ends != 1 || results != 1 {
				t.Fatalf("steered %d, dropped %d, turn ends %d, results %d; want 0, 1, 1, 1", steered, dropped, ends, results)
			}
		}},
		{"dropped by an interrupt", func(t *testing.T, s *supervisor.CLI, rec *clitest.Recorder) {
			send(t, s, "[[steps 3 2000]]")
			waitCLI(t, rec, streaming)
			id := uuid.NewString()
			if err := s.Steer(context.Background(), id, "never heard"); err != nil {
				t.Fatal(err)
			}
			if err := s.Interrupt(context.Background()); err != nil {
				t.Fatal(err)
			}
			if end := rec.WaitEnd(t, time.Minute); !end.Interrupted {
				t.Fatalf("turn end %+v, want interrupted", end)
			}
			if steered, dropped, ends, _ := kinds(rec, id); steered != 0 || dropped != 1 || ends != 1 {
				t.Fatalf("steered %d, dropped %d, turn ends %d; want 0, 1, 1", steered, dropped, ends)
			}
			if got := rec.Turn(t, s, "[[recall]]"); strings.Contains(got, "never heard") {
				t.Fatalf("the dropped message reached the model: %q", got)
			}
			if err := s.Steer(context.Background(), uuid.NewString(), "too late"); !errors.Is(err, supervisor.ErrNotRunning) {
				t.Fatalf("steer with no turn running: %v, want ErrNotRunning", err)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := clitest.New(t, nil)
			rec := clitest.NewRecorder()
			s := newSession(t, env, rec, nil)
			tc.run(t, s, rec)
		})
	}
}
