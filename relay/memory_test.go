package relay

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/clitest"
	"github.com/majorhq/major/internal/standin"
	"github.com/majorhq/major/sessionstore"
	"github.com/majorhq/major/supervisor"
)

// storedRegistry is a registry that keeps its sessions in st, whose CLIs
// run no process: the tests publish the CLI's events themselves, as its
// reader does. It sweeps only when a test calls sweep.
func storedRegistry(tb testing.TB, st *sessionstore.Store, cfg RegistryConfig) *Registry {
	tb.Helper()
	cfg.Launcher = LauncherFunc(func(p SessionParams) CLI {
		return supervisor.NewCLI(supervisor.CLIConfig{ID: p.ID, Person: p.Person, Sink: p.Sink})
	})
	cfg.Store, cfg.EvictAfter, cfg.Logger = st, time.Hour, zerolog.Nop()
	s, err := NewRegistry(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	return s
}

func newStore(tb testing.TB) *sessionstore.Store {
	tb.Helper()
	st, err := sessionstore.New(tb.TempDir(), zerolog.Nop())
	if err != nil {
		tb.Fatal(err)
	}
	return st
}

// answerTurn is one turn as the CLI streams it: the message, the CLI's
// init, the answer's first part in deltas of three characters, a tool call and
// its result, the second part, the result.
func answerTurn(tb testing.TB, message, first, second string) []supervisor.Event {
	tb.Helper()
	now := time.Now()
	evs := []supervisor.Event{
		{Kind: supervisor.EventTurnStart, Text: message, Time: now},
		cliLine(tb, `{"type":"system","subtype":"init","cwd":"/x","session_id":"c1"}`),
	}
	deltas := func(text string) {
		runes := []rune(text)
		for i := 0; i < len(runes); i += 3 {
			evs = append(evs, delta(tb, string(runes[i:min(i+3, len(runes))])))
		}
	}
	deltas(first)
	evs = append(evs,
		cliLine(tb, `{"type":"assistant","message":{"id":"m1","role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Read","input":{"file_path":"a.md"}}]},"session_id":"c1","uuid":"u1"}`),
		cliLine(tb, `{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"the note"}]},"session_id":"c1","uuid":"u2"}`))
	deltas(second)
	result := cliLine(tb, `{"type":"result","subtype":"success","result":"ok","session_id":"c1","total_cost_usd":0.01}`)
	return append(evs, result, supervisor.Event{Kind: supervisor.EventTurnEnd, Msg: result.Msg, Time: now})
}

func publishAll(c *Session, evs []supervisor.Event) {
	for _, ev := range evs {
		c.Publish(ev)
	}
}

// lines is events as a client reads them, one line each.
func lines(events []*Event) string {
	var b strings.Builder
	for _, ev := range events {
		b.Write(ev.Line)
		b.WriteByte('\n')
	}
	return b.String()
}

func jsonOf(tb testing.TB, v any) string {
	tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

// textOf joins the text events' deltas.
func textOf(events []*Event) string {
	var b strings.Builder
	for _, ev := range events {
		if ev.Type == "text" {
			b.WriteString(ev.delta())
		}
	}
	return b.String()
}

// clientState is everything a client reads of a session: every replay
// (from each seq, all events and the web client's types), both
// histories.
type clientState struct {
	replays map[int64]string
	history string
	rich    string
}

func stateOf(tb testing.TB, c *Session) clientState {
	tb.Helper()
	st := clientState{replays: map[int64]string{}, history: jsonOf(tb, c.History()), rich: jsonOf(tb, c.Messages())}
	for after := int64(0); after <= c.Stream().Seq(); after++ {
		sub, err := c.Stream().Subscribe(after, nil, 1)
		if err != nil {
			tb.Fatal(err)
		}
		shown, err := c.Stream().Subscribe(after, webTypes, 1)
		if err != nil {
			tb.Fatal(err)
		}
		st.replays[after] = lines(sub.Replay) + "--\n" + lines(shown.Replay)
		sub.Close()
		shown.Close()
	}
	return st
}

// webTypes are the types the web client attaches with (web/js/api.js).
func webTypes(ev *Event) bool {
	switch ev.Type {
	case "turn_start", "text", "status", "tool", "done", "error", "question", "question_answered", "permission",
		"permission_answered", "draft", "draft_answered", "settings", "refused", "rate_limit":
		return true
	}
	return false
}

func sameState(tb testing.TB, what string, got, want clientState) {
	tb.Helper()
	if got.history != want.history {
		tb.Errorf("%s: history %s, want %s", what, got.history, want.history)
	}
	if got.rich != want.rich {
		tb.Errorf("%s: messages %s, want %s", what, got.rich, want.rich)
	}
	if len(got.replays) != len(want.replays) {
		tb.Fatalf("%s: %d replays, want %d", what, len(got.replays), len(want.replays))
	}
	for after, w := range want.replays {
		if g := got.replays[after]; g != w {
			tb.Fatalf("%s: replay after %d:\n%s\nwant:\n%s", what, after, g, w)
		}
	}
}

// An idle session's events leave memory (with its compat history, and
// its log file closed) and come back from its log the same: every replay
// from every seq, with the same seqs, and both histories.
func TestEvictedSessionComesBackTheSame(t *testing.T) {
	st := newStore(t)
	s := storedRegistry(t, st, RegistryConfig{})
	c, _ := s.GetOrCreate("", "sebastian")
	publishAll(c, answerTurn(t, "first question", "The first answer, in parts. ", "And after the tool."))
	publishAll(c, answerTurn(t, "second question", "Short.", " Done <now> & \"quoted\"."))
	c.Notice("between turns")
	c.stream.tidy()
	before := stateOf(t, c)

	for _, read := range []string{"history first", "events first"} {
		t.Run(read, func(t *testing.T) {
			if !c.evict() {
				t.Fatal("an idle session was not evicted")
			}
			c.mu.Lock()
			hist := c.hist
			c.mu.Unlock()
			if !c.stream.isCold() || len(c.stream.events) != 0 || hist != nil {
				t.Fatalf("evicted, the session keeps %d events (history %v)", len(c.stream.events), hist != nil)
			}
			if n := clitest.OpenFiles(t, st.LogPath(c.Person, c.ID)); n != 0 {
				t.Fatalf("evicted, the session holds its log open (%d)", n)
			}
			if read == "history first" {
				if got := jsonOf(t, c.History()); got != before.history {
					t.Fatalf("history read back: %s, want %s", got, before.history)
				}
			}
			sameState(t, "read back", stateOf(t, c), before)
		})
	}
}

// A finished turn's deltas are coalesced, one text event per part of the
// answer, and the seqs clients hold stay valid: a client that saw the
// events up to any seq (all of them, or the web client's types) and
// re-attaches after it gets the rest of the text, none of it twice and
// none lost, with seqs above its own; the histories do not change. The
// same holds once the session was evicted and read back.
func TestReattachAcrossCoalescing(t *testing.T) {
	st := newStore(t)
	s := storedRegistry(t, st, RegistryConfig{})
	c, _ := s.GetOrCreate("", "sebastian")
	live, err := c.Stream().Subscribe(0, nil, 4096)
	if err != nil {
		t.Fatal(err)
	}
	publishAll(c, answerTurn(t, "a question", "Ünïcode 🙂 split across deltas, and a long first part. ", "The second part."))
	var seen []*Event
	for ev := range live.C {
		seen = append(seen, ev)
		if ev.Terminal {
			break
		}
	}
	live.Close()
	history, rich := jsonOf(t, c.History()), jsonOf(t, c.Messages())

	c.stream.tidy()
	var texts int
	for _, ev := range c.Stream().Events(0) {
		if ev.Type == "text" {
			texts++
		}
	}
	if texts != 2 {
		t.Fatalf("after the turn, %d text events; want 2, one per part", texts)
	}
	check := func(t *testing.T) {
		if h, r := jsonOf(t, c.History()), jsonOf(t, c.Messages()); h != history || r != rich {
			t.Fatalf("histories changed:\n%s\n%s\nwant\n%s\n%s", h, r, history, rich)
		}
		for _, filter := range []func(*Event) bool{nil, webTypes} {
			var shown []*Event
			for _, ev := range seen {
				if filter == nil || filter(ev) {
					shown = append(shown, ev)
				}
			}
			want := textOf(shown)
			for n, held := range shown {
				sub, err := c.Stream().Subscribe(held.Seq, filter, 1)
				if err != nil {
					t.Fatal(err)
				}
				sub.Close()
				last := held.Seq
				for _, ev := range sub.Replay {
					if ev.Seq <= last {
						t.Fatalf("after %d: replayed seq %d after %d", held.Seq, ev.Seq, last)
					}
					last = ev.Seq
				}
				if got := textOf(shown[:n+1]) + textOf(sub.Replay); got != want {
					t.Fatalf("a client holding seq %d reads %q, want %q", held.Seq, got, want)
				}
			}
		}
	}
	t.Run("coalesced", check)
	if !c.evict() {
		t.Fatal("not evicted")
	}
	t.Run("read back", check)
}

// A compaction is the log writer's: while it is held (a slow disk), the
// session publishes, its clients get every event and its lock is free;
// afterwards the log and the memory hold the same events, without the cli
// events of the old turns. A log whose events are all past the limit is
// not compacted again at every turn: only once it has doubled.
func TestCompactionLeavesPublishingFree(t *testing.T) {
	st := newStore(t)
	entered, release := make(chan struct{}, 8), make(chan struct{})
	replaced := 0
	st.ReplaceFile = func(path string, b []byte) error {
		replaced++
		entered <- struct{}{}
		<-release
		return os.WriteFile(path, b, 0o600)
	}
	s := storedRegistry(t, st, RegistryConfig{MaxLogBytes: 4 << 10})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	t.Cleanup(open) // before the registry's Close, should the test fail
	c, _ := s.GetOrCreate("", "sebastian")
	sub, err := c.Stream().Subscribe(0, nil, 1<<14)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	turn := func(n int) {
		publishAll(c, []supervisor.Event{
			{Kind: supervisor.EventTurnStart, Text: fmt.Sprint("turn ", n), Time: time.Now()},
			cliLine(t, fmt.Sprintf(`{"type":"system","subtype":"status","n":%d,"pad":%q}`, n, strings.Repeat("x", 300))),
			{Kind: supervisor.EventTurnEnd, Time: time.Now()},
		})
	}
	for n := 1; n <= DefaultKeepCLITurns+1; n++ {
		turn(n)
	}
	<-entered // the writer is inside the compaction asked at the last turn's end
	for n := DefaultKeepCLITurns + 2; n <= DefaultKeepCLITurns+6; n++ {
		turn(n)
	}
	if h := c.History(); len(h) != DefaultKeepCLITurns+6 { // the turns have no text
		t.Fatalf("history while the compaction is held: %d entries", len(h))
	}
	for range c.Stream().Events(0) {
		if ev := <-sub.C; ev == nil {
			t.Fatal("a client missed an event")
		}
	}
	open()
	// Past the limit, but not twice the compacted size: the next turns
	// do not compact again. (Records waits for the writer.)
	if _, err := c.elog.Records(); err != nil {
		t.Fatal(err)
	}
	for n := DefaultKeepCLITurns + 7; n <= DefaultKeepCLITurns+10; n++ {
		turn(n)
	}
	if _, err := c.elog.Records(); err != nil {
		t.Fatal(err)
	}
	if replaced != 1 {
		t.Fatalf("the log was compacted %d times, want once", replaced)
	}
	s.Close()
	c.stream.tidy()
	want := c.stream.events
	for _, ev := range want {
		if ev.Type == "cli" && ev.Turn <= 1 {
			t.Fatalf("memory keeps a cli event of turn %d: %s", ev.Turn, ev.Line)
		}
	}
	got, err := st.ReadLog(st.LogPath(c.Person, c.ID))
	if err != nil || len(got) != len(want) {
		t.Fatalf("log holds %d events (%v), memory %d", len(got), err, len(want))
	}
	for i := range got {
		if !bytes.Equal(got[i].Line, want[i].Line) {
			t.Fatalf("event %d: %s, memory %s", i, got[i].Line, want[i].Line)
		}
	}
}

// The sweep evicts the sessions nothing used since the sweep before, and
// no other: not one a client is attached to, one whose turn runs, one
// read since, or one whose log failed (its events are in memory only).
func TestSweepEvictsOnlyUnusedSessions(t *testing.T) {
	st := newStore(t)
	s := storedRegistry(t, st, RegistryConfig{})
	turn := func(c *Session) { publishAll(c, answerTurn(t, "q", "an answer", " more")) }
	idle, attached, running, read := []*Session{}, []*Session{}, []*Session{}, []*Session{}
	for _, set := range []*[]*Session{&idle, &attached, &running, &read} {
		c, _ := s.GetOrCreate("", "sebastian")
		turn(c)
		*set = append(*set, c)
	}
	sub, _ := attached[0].Stream().Subscribe(0, nil, 1024)
	defer sub.Close()
	running[0].Publish(supervisor.Event{Kind: supervisor.EventTurnStart, Text: "still running", Time: time.Now()})

	failing := newStore(t)
	failing.SyncFile = func(*os.File) error { return errors.New("disk gone") }
	fs := storedRegistry(t, failing, RegistryConfig{})
	broken, _ := fs.GetOrCreate("", "sebastian")
	turn(broken) // its fsync fails: the log stops

	s.sweep()
	fs.sweep()
	read[0].History()
	s.sweep()
	fs.sweep()
	cases := []struct {
		name string
		c    *Session
		cold bool
	}{
		{"idle", idle[0], true},
		{"attached", attached[0], false},
		{"running", running[0], false},
		{"read between sweeps", read[0], false},
		{"failed log", broken, false},
	}
	for _, tc := range cases {
		if got := tc.c.stream.isCold(); got != tc.cold {
			t.Errorf("%s: cold %v, want %v", tc.name, got, tc.cold)
		}
	}
	s.sweep()
	if !read[0].stream.isCold() {
		t.Error("a session read once stays in memory for good")
	}
	for _, tc := range cases {
		if h := tc.c.History(); len(h) < 2 || h[1].Content != "an answer more" {
			t.Errorf("%s: history %v", tc.name, h)
		}
	}
}

// A restart restores every session as it was, evicted or not, with the
// events published while it was evicted; at start each one's events are
// on disk only, and a turn the restart cut off ends with an error.
func TestRestartRestoresEvictedSessions(t *testing.T) {
	st := newStore(t)
	s := storedRegistry(t, st, RegistryConfig{})
	evicted, _ := s.GetOrCreate("", "sebastian")
	publishAll(evicted, answerTurn(t, "one", "first answer", "."))
	publishAll(evicted, answerTurn(t, "two", "second answer", "!"))
	touched, _ := s.GetOrCreate("", "petra")
	publishAll(touched, answerTurn(t, "three", "third answer", "?"))
	cut, _ := s.GetOrCreate("", "sebastian")
	publishAll(cut, answerTurn(t, "four", "fourth answer", "."))
	for _, c := range []*Session{evicted, touched} {
		if !c.evict() {
			t.Fatal("not evicted")
		}
	}
	touched.Notice("published while evicted")
	cut.Publish(supervisor.Event{Kind: supervisor.EventTurnStart, Text: "five", Time: time.Now()})
	cut.Publish(delta(t, "cut o"))
	cut.Publish(delta(t, "ff"))
	want := map[string]clientState{}
	for _, c := range []*Session{evicted, touched, cut} {
		c.stream.tidy()
		want[c.ID] = stateOf(t, c)
	}
	s.Close()

	s2 := storedRegistry(t, st, RegistryConfig{})
	for _, c := range []*Session{evicted, touched, cut} {
		got, err := s2.Get(c.ID, c.Person)
		if err != nil {
			t.Fatal(err)
		}
		if !got.stream.isCold() {
			t.Fatalf("session %s is in memory at start", c.ID)
		}
		if c == cut {
			h := got.History()
			if n := len(h); n != 4 || !strings.HasPrefix(h[3].Content, "cut off\n\n[Failed: ") {
				t.Fatalf("cut-off turn after restart: %v", h)
			}
			continue
		}
		sameState(t, "after restart", stateOf(t, got), want[c.ID])
	}
}

// A message to an evicted session runs as any other, on the stand-in CLI:
// its client follows the turn from its start as chat-stream does, and
// both histories and every replay hold the turns before it and the new
// one; the turns before read as they did before the eviction. A resend of
// an answer no chat-stream delivered still joins its turn.
func TestMessageAfterEvictionResumes(t *testing.T) {
	bin := standin.Build(t)
	st := newStore(t)
	s, err := NewRegistry(RegistryConfig{
		Launcher: LauncherFunc(func(p SessionParams) CLI {
			return supervisor.NewCLI(supervisor.CLIConfig{
				ID: p.ID, Person: p.Person, Dir: t.TempDir(), CLISessionID: p.CLISessionID,
				Spec:   supervisor.Spec{Binary: bin, Env: []string{"PATH=/usr/bin:/bin"}, Grace: 2 * time.Second},
				Sink:   p.Sink,
				Logger: zerolog.Nop(),
			})
		}),
		Store: st, EvictAfter: time.Hour, Logger: zerolog.Nop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, _ := s.GetOrCreate("", "sebastian")
	var tickets []*Ticket
	message := func(text string) string {
		t.Helper()
		tk, err := s.Submit(c, text, SubmitOptions{Stream: true})
		if err != nil {
			t.Fatal(err)
		}
		tickets = append(tickets, tk)
		<-tk.Started()
		if tk.Err() != nil {
			t.Fatal(tk.Err())
		}
		turn := tk.Turn()
		sub, err := c.Stream().Subscribe(tk.StartSeq(), func(ev *Event) bool { return ev.Turn == turn && ev.Compat != nil }, 4096)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		got := append([]*Event(nil), sub.Replay...)
		for len(got) == 0 || !got[len(got)-1].Terminal {
			ev, ok := <-sub.C
			if !ok {
				t.Fatalf("stream ended: %v", sub.Err())
			}
			got = append(got, ev)
		}
		if end := got[len(got)-1]; end.Type != "done" {
			t.Fatalf("turn ended with %s", end.Line)
		}
		return textOf(got)
	}
	first := message("deltas:12 size:5")
	c.stream.tidy()
	before := stateOf(t, c)
	c.CLI().StopIfIdle()
	if !c.evict() {
		t.Fatal("not evicted")
	}
	// The first answer was never marked delivered: the same words again,
	// within the resend window, follow that turn instead of running again.
	if again := message("deltas:12 size:5"); again != first || tickets[1] != tickets[0] {
		t.Fatalf("a resend after the eviction read %q (same ticket: %v), want %q", again, tickets[1] == tickets[0], first)
	}
	second := message("deltas:7 size:9")
	if len(first) != 60 || len(second) != 63 {
		t.Fatalf("turns streamed %d and %d bytes", len(first), len(second))
	}
	h := c.History()
	if len(h) != 4 || h[1].Content != first || h[3].Content != second || h[2].Content != "deltas:7 size:9" {
		t.Fatalf("history after a message to an evicted session: %+v", h)
	}
	if m := c.Messages(); len(m) != 4 || m[3].Content != second || m[3].Outcome != "success" {
		t.Fatalf("messages: %s", jsonOf(t, m))
	}
	c.stream.tidy()
	after := stateOf(t, c)
	for seq, replay := range before.replays {
		// What a client held before still replays the same up to the
		// first turn's end, then the new turn.
		if !strings.HasPrefix(after.replays[seq], strings.SplitN(replay, "--\n", 2)[0]) {
			t.Fatalf("replay after %d changed:\n%s\nwas\n%s", seq, after.replays[seq], replay)
		}
	}
	if title := c.Info().Title; title != "deltas:12 size:5" {
		t.Fatalf("title %q", title)
	}
}
