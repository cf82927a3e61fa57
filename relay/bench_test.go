package relay

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/internal/standin"
	"github.com/majorhq/major/supervisor"
)

// BenchmarkFanOut times publishing one event to 1, 10 and 100 subscribers
// against plain non-blocking sends of the same bytes to as many buffered
// channels, in the same loop, in batches of 256. x-baseline is publish
// time over channel-send time.
func BenchmarkFanOut(b *testing.B) {
	body := []byte(`{"type":"text","delta":"` + strings.Repeat("w", 256) + `"}`)
	const batch = 256
	for _, n := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("subs=%d", n), func(b *testing.B) {
			var pub, baseline time.Duration
			chans := make([]chan []byte, n)
			for i := range chans {
				chans[i] = make(chan []byte, batch)
			}
			for b.Loop() {
				s := NewStream(nil)
				subs := make([]*Subscription, n)
				for i := range subs {
					sub, err := s.Subscribe(0, nil, batch)
					if err != nil {
						b.Fatal(err)
					}
					subs[i] = sub
				}
				t0 := time.Now()
				for range batch {
					s.publish("text", body, false, false)
				}
				t1 := time.Now()
				for range batch {
					for _, ch := range chans {
						select {
						case ch <- body:
						default:
							b.Fatal("baseline channel full")
						}
					}
				}
				baseline += time.Since(t1)
				pub += t1.Sub(t0)
				for _, sub := range subs {
					if len(sub.C) != batch {
						b.Fatalf("subscriber got %d events, want %d", len(sub.C), batch)
					}
					sub.Close()
				}
				for _, ch := range chans {
					for range batch {
						<-ch
					}
				}
			}
			b.ReportMetric(float64(pub)/float64(baseline), "x-baseline")
		})
	}
}

// BenchmarkTurn times one turn of 50 text deltas from the stand-in CLI
// through the supervisor and the relay's translation into the stream,
// against the same stand-in driven over raw pipes (write the user line,
// read lines to the result), in the same loop. x-baseline is the
// supervisor-and-relay time over the raw-pipe time.
func BenchmarkTurn(b *testing.B) {
	bin := standin.Build(b)
	const msg = "deltas:50 size:24"

	// Through the relay.
	sessions, err := NewRegistry(RegistryConfig{
		Launcher: LauncherFunc(func(p SessionParams) CLI {
			return supervisor.NewCLI(supervisor.CLIConfig{
				ID: p.ID, Person: p.Person, Dir: b.TempDir(),
				Spec:   supervisor.Spec{Binary: bin, Env: []string{"PATH=/usr/bin:/bin"}, Grace: 2 * time.Second},
				Sink:   p.Sink,
				Logger: zerolog.Nop(),
			})
		}),
		Logger: zerolog.Nop(),
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(sessions.Close)
	chat, _ := sessions.GetOrCreate("", "sebastian")
	sub, err := chat.Stream().Subscribe(0, nil, 1<<16)
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Close()
	relayTurn := func() {
		if err := chat.CLI().Send(context.Background(), msg); err != nil {
			b.Fatal(err)
		}
		for ev := range sub.C {
			if ev.Terminal {
				if ev.Type != "done" {
					b.Fatalf("turn ended with %s", ev.Line)
				}
				return
			}
		}
		b.Fatalf("stream ended: %v", sub.Err())
	}

	// Raw pipes to the same program.
	cmd := exec.Command(bin)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	}()
	out := bufio.NewReaderSize(stdout, 64<<10)
	userLine, _ := json.Marshal(map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": msg}})
	userLine = append(userLine, '\n')
	rawTurn := func() {
		if _, err := stdin.Write(userLine); err != nil {
			b.Fatal(err)
		}
		for {
			line, err := out.ReadBytes('\n')
			if err != nil {
				b.Fatalf("raw stand-in: %v", err)
			}
			// Only the result line has this member (its text is letters).
			if bytes.Contains(line, []byte(`"type":"result"`)) {
				return
			}
		}
	}
	relayTurn() // start the process outside the timing
	rawTurn()

	var through, baseline time.Duration
	for b.Loop() {
		t0 := time.Now()
		relayTurn()
		t1 := time.Now()
		rawTurn()
		through += t1.Sub(t0)
		baseline += time.Since(t1)
	}
	b.ReportMetric(float64(through)/float64(baseline), "x-baseline")
}

// BenchmarkPublishPersisted times publishing 8 turns of 32 events into a
// stream whose log is on disk against the same into a stream kept in
// memory only, in the same loop. The log writer writes and fsyncs
// meanwhile; x-baseline is persisted time over in-memory time, the cost
// the disk adds to the goroutine that publishes.
func BenchmarkPublishPersisted(b *testing.B) {
	body := []byte(`{"type":"text","delta":"` + strings.Repeat("w", 256) + `"}`)
	st, err := NewStore(b.TempDir(), zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	publishTurns := func(s *Stream) {
		for range 8 {
			s.publish("turn_start", []byte(`{"type":"turn_start","message":"m"}`), true, false)
			for range 30 {
				s.publish("text", body, false, false)
			}
			s.publish("done", []byte(`{"type":"done","session_id":"s"}`), false, true)
		}
	}
	var persisted, memory time.Duration
	for b.Loop() {
		l, err := st.openLog("bench")
		if err != nil {
			b.Fatal(err)
		}
		disk, mem := NewStream(l.append), NewStream(nil)
		t0 := time.Now()
		publishTurns(disk)
		t1 := time.Now()
		publishTurns(mem)
		memory += time.Since(t1)
		persisted += t1.Sub(t0)
		b.StopTimer()
		if err := l.close(); err != nil {
			b.Fatal(err)
		}
		if err := st.remove("bench"); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(persisted)/float64(memory), "x-baseline")
}
