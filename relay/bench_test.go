package relay

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/clientevent"
	"github.com/majorhq/major/internal/standin"
	"github.com/majorhq/major/sessionstore"
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
		ServerPaths: benchServerPaths,
		Logger:      zerolog.Nop(),
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
	st, err := sessionstore.New(b.TempDir(), zerolog.Nop())
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
		l, err := st.Open("sebastian", "bench")
		if err != nil {
			b.Fatal(err)
		}
		disk, mem := NewStream(func(ev *Event) { l.Append(record(ev)) }), NewStream(nil)
		t0 := time.Now()
		publishTurns(disk)
		t1 := time.Now()
		publishTurns(mem)
		memory += time.Since(t1)
		persisted += t1.Sub(t0)
		b.StopTimer()
		if err := l.Close(); err != nil {
			b.Fatal(err)
		}
		if err := st.Remove("sebastian", "bench"); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(persisted)/float64(memory), "x-baseline")
}

// standinSession is a session on the stand-in CLI, with subs subscribers
// that read every event until the turn's end.
func standinSession(b testing.TB, bin string, store *sessionstore.Store) (*Registry, *Session) {
	b.Helper()
	sessions, err := NewRegistry(RegistryConfig{
		Launcher: LauncherFunc(func(p SessionParams) CLI {
			return supervisor.NewCLI(supervisor.CLIConfig{
				ID: p.ID, Person: p.Person, Dir: b.TempDir(),
				Spec:   supervisor.Spec{Binary: bin, Env: []string{"PATH=/usr/bin:/bin"}, Grace: 2 * time.Second},
				Sink:   p.Sink,
				Logger: zerolog.Nop(),
			})
		}),
		Store:       store,
		ServerPaths: benchServerPaths,
		Logger:      zerolog.Nop(),
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(sessions.Close)
	chat, _ := sessions.GetOrCreate("", "sebastian")
	return sessions, chat
}

// relayTurn runs one turn of msg with subs subscribers and calls seen for
// each text event the first subscriber gets, at the time it gets it.
func relayTurn(b testing.TB, chat *Session, msg string, subs int, seen func(*Event, time.Time)) {
	b.Helper()
	done := make(chan error, subs)
	for i := range subs {
		sub, err := chat.Stream().Subscribe(chat.Stream().Seq(), nil, 1<<16)
		if err != nil {
			b.Fatal(err)
		}
		go func() {
			defer sub.Close()
			for ev := range sub.C {
				if i == 0 && seen != nil && ev.Type == "text" {
					seen(ev, time.Now())
				}
				if ev.Terminal {
					done <- nil
					return
				}
			}
			done <- fmt.Errorf("stream ended: %v", sub.Err())
		}()
	}
	if err := chat.CLI().Send(context.Background(), msg); err != nil {
		b.Fatal(err)
	}
	for range subs {
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
}

// rawPipe is the stand-in driven over its pipes, the baseline.
type rawPipe struct {
	stdin io.Writer
	out   *bufio.Reader
}

func startRaw(b *testing.B, bin string) *rawPipe {
	b.Helper()
	cmd := exec.Command(bin)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	})
	return &rawPipe{stdin: stdin, out: bufio.NewReaderSize(stdout, 64<<10)}
}

// turn writes the user line and reads lines to the result, calling line
// for each with the time it was read.
func (r *rawPipe) turn(b *testing.B, msg string, line func([]byte, time.Time)) {
	b.Helper()
	user, _ := json.Marshal(map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": msg}})
	if _, err := r.stdin.Write(append(user, '\n')); err != nil {
		b.Fatal(err)
	}
	for {
		l, err := r.out.ReadBytes('\n')
		if err != nil {
			b.Fatalf("raw stand-in: %v", err)
		}
		if line != nil {
			line(l, time.Now())
		}
		if bytes.Contains(l, []byte(`"type":"result"`)) {
			return
		}
	}
}

// BenchmarkRelayThroughput times a turn of 2,000 text deltas from the
// stand-in CLI's stdout through the supervisor and the relay to 1, 10 and
// 100 subscribers that read every event, against reading the same
// stand-in's stdout over a raw pipe, in the same loop. x-baseline is relay
// time over pipe time; the relay's throughput is 1/x-baseline of the
// pipe's.
func BenchmarkRelayThroughput(b *testing.B) {
	bin := standin.Build(b)
	msg := "deltas:2000 size:64"
	if testing.Short() { // make test's run, to keep it working, not to measure
		msg = "deltas:200 size:64"
	}
	for _, n := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("subs=%d", n), func(b *testing.B) {
			_, chat := standinSession(b, bin, nil)
			raw := startRaw(b, bin)
			relayTurn(b, chat, "deltas:1", 1, nil) // start the process outside the timing
			raw.turn(b, "deltas:1", nil)
			var through, baseline time.Duration
			for b.Loop() {
				t0 := time.Now()
				relayTurn(b, chat, msg, n, nil)
				t1 := time.Now()
				raw.turn(b, msg, nil)
				through += t1.Sub(t0)
				baseline += time.Since(t1)
			}
			b.ReportMetric(float64(through)/float64(baseline), "x-baseline")
		})
	}
}

// BenchmarkRelayLatency streams 1,000 text deltas at 1,000 a second, each
// stamped with the wall-clock time the stand-in wrote it, through the
// supervisor and the relay to one subscriber, and over a raw pipe, in the
// same loop: ten turns of 100 deltas each way, alternating, so a moment
// of load on the machine falls on both sides alike. p99-us is the relay's 99th percentile from write to the
// subscriber, raw-p99-us the pipe's, added-p99-us their difference;
// x-baseline is relay p99 over pipe p99.
func BenchmarkRelayLatency(b *testing.B) {
	bin := standin.Build(b)
	const msg = "deltas:100 delay:1ms stamp:1 size:32"
	rounds := 10
	if testing.Short() {
		rounds = 1
	}
	_, chat := standinSession(b, bin, nil)
	raw := startRaw(b, bin)
	relayTurn(b, chat, "deltas:1", 1, nil)
	raw.turn(b, "deltas:1", nil)
	var relayLat, rawLat []time.Duration
	stampOf := func(text []byte) (time.Time, bool) {
		i := bytes.Index(text, []byte(`"text":"`))
		if i < 0 {
			return time.Time{}, false
		}
		var ns int64
		if _, err := fmt.Sscan(string(text[i+len(`"text":"`):]), &ns); err != nil || ns == 0 {
			return time.Time{}, false
		}
		return time.Unix(0, ns), true
	}
	for b.Loop() {
		for range rounds {
			latencyRound(b, chat, raw, msg, stampOf, &relayLat, &rawLat)
		}
	}
	if len(relayLat) == 0 || len(rawLat) == 0 {
		b.Fatalf("no stamped deltas seen (relay %d, raw %d)", len(relayLat), len(rawLat))
	}
	p99 := func(d []time.Duration) time.Duration {
		slices.Sort(d)
		return d[len(d)*99/100]
	}
	r, p := p99(relayLat), p99(rawLat)
	b.ReportMetric(float64(r.Microseconds()), "p99-us")
	b.ReportMetric(float64(p.Microseconds()), "raw-p99-us")
	b.ReportMetric(float64((r - p).Microseconds()), "added-p99-us")
	b.ReportMetric(float64(r)/float64(max(p, time.Microsecond)), "x-baseline")
}

// latencyRound runs msg once through the relay's chat and once over the
// raw pipe, adding each stamped delta's latency to relayLat and rawLat.
func latencyRound(b *testing.B, chat *Session, raw *rawPipe, msg string, stampOf func([]byte) (time.Time, bool), relayLat, rawLat *[]time.Duration) {
	relayTurn(b, chat, msg, 1, func(ev *Event, at time.Time) {
		i := bytes.Index(ev.Line, []byte(`"delta":"`))
		var ns int64
		if i >= 0 {
			_, _ = fmt.Sscan(string(ev.Line[i+len(`"delta":"`):]), &ns)
		}
		if ns > 0 {
			*relayLat = append(*relayLat, at.Sub(time.Unix(0, ns)))
		}
	})
	raw.turn(b, msg, func(l []byte, at time.Time) {
		if !bytes.Contains(l, []byte(`"text_delta"`)) {
			return
		}
		if t, ok := stampOf(l); ok {
			*rawLat = append(*rawLat, at.Sub(t))
		}
	})
}

// BenchmarkSessionMemory measures the server's memory per session: 50
// sessions (5 with -short), each after a short history (one turn of 50
// deltas on the stand-in CLI) or a long one (20 such turns; 5 with
// -short). live: the CLI running (it is another process and not counted),
// every event in memory, heap in use and stacks. idle: the CLI stopped and
// the events evicted, as the sweep leaves an idle session: idle-B is the
// live heap the sessions keep (after GC), idle-inuse-B the heap in use
// and stacks, which also count the heap spans the evicted events leave
// part-used and the stacks the stopped CLIs' readers left, both reused by
// later allocations; goroutines is what each idle session keeps running.
// x-baseline is idle-B over the bytes of the session's log on disk.
func BenchmarkSessionMemory(b *testing.B) {
	bin := standin.Build(b)
	n, long := 50, 20
	if testing.Short() {
		n, long = 5, 5
	}
	type mem struct{ alloc, inuse, goroutines float64 }
	measure := func() mem {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return mem{float64(m.HeapAlloc), float64(m.HeapInuse + m.StackInuse), float64(runtime.NumGoroutine())}
	}
	for _, turns := range []int{1, long} {
		b.Run(fmt.Sprintf("turns=%d", turns), func(b *testing.B) {
			for b.Loop() {
				store, err := sessionstore.New(b.TempDir(), zerolog.Nop())
				if err != nil {
					b.Fatal(err)
				}
				sessions, _ := standinSession(b, bin, store)
				before := measure()
				var chats []*Session
				for range n {
					chat, err := sessions.GetOrCreate("", "sebastian")
					if err != nil {
						b.Fatal(err)
					}
					for range turns {
						relayTurn(b, chat, "deltas:50 size:24", 1, nil)
					}
					chats = append(chats, chat)
				}
				live := measure()
				for _, c := range chats {
					c.CLI().(*supervisor.CLI).StopIfIdle()
				}
				time.Sleep(100 * time.Millisecond) // the readers of the stopped CLIs end
				for _, c := range chats {
					if !c.evict() {
						b.Fatal("an idle session was not evicted")
					}
				}
				idle := measure()
				var logged int64
				for _, c := range chats {
					fi, err := os.Stat(store.LogPath(c.Person, c.ID))
					if err != nil {
						b.Fatal(err)
					}
					logged += fi.Size()
				}
				per := func(after, before float64) float64 { return max(after-before, 0) / float64(n) }
				b.ReportMetric(per(idle.alloc, before.alloc), "idle-B/session")
				b.ReportMetric(per(idle.inuse, before.inuse), "idle-inuse-B/session")
				b.ReportMetric(per(idle.goroutines, before.goroutines), "goroutines/session")
				b.ReportMetric(per(live.inuse, before.inuse), "live-B/session")
				b.ReportMetric(per(idle.alloc, before.alloc)/(float64(logged)/float64(n)), "x-baseline")
				sessions.Close()
			}
		})
	}
}

// benchServerPaths are a production server's folders: the sessions of the
// benchmarks hide them, as cmd/major's do.
var benchServerPaths = clientevent.ServerPaths{
	VaultRoot: "/srv/notes",
	Hidden: []string{"/srv", "/var/lib/major", "/etc/major", "/home/major/.claude", "/opt/major/.tools/claude/node_modules/.bin",
		"/opt/major/.tools/claude/node_modules/@anthropic-ai/claude-code", "/opt/major/bin", "/tmp", "/run/user/1000"},
	Home: "/home/major",
}

// BenchmarkRedact times one turn of the CLI's messages (its init message
// naming the server's folders, a Read of a note and its result, 200 text
// deltas, one of them naming a server path, the whole answer, the result)
// published through a session that hides the server's paths, against the
// same through a session that hides none (translated and encoded alike),
// in the same loop, in batches of 16 turns. x-baseline is redacting time
// over plain time: the redaction's cost on the hot path.
func BenchmarkRedact(b *testing.B) {
	line := func(v any) supervisor.Event {
		raw, _ := json.Marshal(v)
		m, err := supervisor.DecodeMessage(raw)
		if err != nil {
			b.Fatal(err)
		}
		return supervisor.Event{Kind: supervisor.EventCLI, Msg: m}
	}
	words := strings.Fields(strings.Repeat("the note on /srv/notes/sebastian/notes/garden.md says to water the roses twice a week ", 12))
	var answer strings.Builder
	turn := []supervisor.Event{
		{Kind: supervisor.EventTurnStart, Text: "what does my garden note say?"},
		line(map[string]any{"type": "system", "subtype": "init", "cwd": "/srv/notes/sebastian", "session_id": "c1",
			"tools":                 []string{"Read", "Write", "Edit", "Glob", "Grep", "WebFetch", "WebSearch", "Skill"},
			"plugins":               []map[string]string{{"name": "major", "path": "/var/lib/major/session-config/skills/0123456789abcdef/major"}},
			"memory_paths":          map[string]string{"auto": "/home/major/.claude/projects/-srv-notes-sebastian/memory/"},
			"messaging_socket_path": "/tmp/cc-socks/4242.sock"}),
		line(map[string]any{"type": "assistant", "session_id": "c1", "uuid": "u1", "message": map[string]any{"id": "m1", "role": "assistant",
			"content": []map[string]any{{"type": "tool_use", "id": "t1", "name": "Read", "input": map[string]string{"file_path": "/srv/notes/sebastian/notes/garden.md"}}}}}),
		line(map[string]any{"type": "user", "session_id": "c1", "uuid": "u2", "message": map[string]any{"role": "user",
			"content": []map[string]any{{"type": "tool_result", "tool_use_id": "t1", "content": strings.Repeat("1\tWater the roses twice a week.\n", 40)}}},
			"tool_use_result": map[string]any{"file": map[string]string{"filePath": "/srv/notes/sebastian/notes/garden.md"}}}),
	}
	for i := range 200 {
		w := words[i%len(words)] + " "
		answer.WriteString(w)
		turn = append(turn, line(map[string]any{"type": "stream_event", "session_id": "c1", "parent_tool_use_id": nil, "uuid": fmt.Sprint("d", i),
			"event": map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]string{"type": "text_delta", "text": w}}}))
	}
	result := line(map[string]any{"type": "result", "subtype": "success", "session_id": "c1", "result": answer.String(), "total_cost_usd": 0.01})
	turn = append(turn,
		line(map[string]any{"type": "assistant", "session_id": "c1", "uuid": "u3", "message": map[string]any{"id": "m2", "role": "assistant",
			"content": []map[string]any{{"type": "text", "text": answer.String()}}}}),
		result,
		supervisor.Event{Kind: supervisor.EventTurnEnd, Msg: result.Msg},
	)
	session := func(paths clientevent.ServerPaths) *Session {
		s, err := NewRegistry(RegistryConfig{Launcher: LauncherFunc(func(p SessionParams) CLI {
			return supervisor.NewCLI(supervisor.CLIConfig{ID: p.ID, Person: p.Person, Sink: p.Sink})
		}), ServerPaths: paths, Logger: zerolog.Nop()})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(s.Close)
		c, _ := s.GetOrCreate("", "sebastian")
		return c
	}
	const batch = 16
	var redacting, plain time.Duration
	for b.Loop() {
		hidden, open := session(benchServerPaths), session(clientevent.ServerPaths{})
		t0 := time.Now()
		for range batch {
			for _, ev := range turn {
				hidden.Publish(ev)
			}
		}
		t1 := time.Now()
		for range batch {
			for _, ev := range turn {
				open.Publish(ev)
			}
		}
		plain += time.Since(t1)
		redacting += t1.Sub(t0)
		for _, ev := range hidden.Stream().Events(0) {
			if bytes.Contains(ev.Line, []byte("/srv/notes")) {
				b.Fatalf("not redacted: %s", ev.Line)
			}
		}
	}
	b.ReportMetric(float64(redacting)/float64(plain), "x-baseline")
}
