package relay

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/clientevent"
	"github.com/majorhq/major/sessionstore"
	"github.com/majorhq/major/supervisor"
)

// heldDisk stands for a disk that does not finish an fsync until released.
type heldDisk struct {
	entered chan struct{} // one value per fsync that started
	release chan struct{}
	once    sync.Once
}

func newHeldDisk(tb testing.TB) *heldDisk {
	tb.Helper()
	d := &heldDisk{entered: make(chan struct{}, 64), release: make(chan struct{})}
	tb.Cleanup(d.open)
	return d
}

func (d *heldDisk) sync(f *os.File) error {
	select {
	case d.entered <- struct{}{}:
	default:
	}
	<-d.release
	return f.Sync()
}

func (d *heldDisk) open() { d.once.Do(func() { close(d.release) }) }

func unstartedSessions(tb testing.TB, st *sessionstore.Store) *Registry {
	tb.Helper()
	launch := LauncherFunc(func(p SessionParams) CLI {
		return supervisor.NewCLI(supervisor.CLIConfig{ID: p.ID, Person: p.Person, Sink: p.Sink})
	})
	s, err := NewRegistry(RegistryConfig{Launcher: launch, Store: st, Logger: zerolog.Nop()})
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// publishTurn sends one turn's supervisor events through the chat, as the
// CLI reader does.
func publishTurn(c *Session, msg string, notices int) {
	now := time.Now()
	c.Publish(supervisor.Event{Kind: supervisor.EventTurnStart, Text: msg, Time: now})
	for i := range notices {
		c.Publish(supervisor.Event{Kind: supervisor.EventNotice, Text: fmt.Sprintf("%s step %d", msg, i), Time: now})
	}
	c.Publish(supervisor.Event{Kind: supervisor.EventTurnEnd, Time: now})
}

// A turn's end is fsynced by the log writer, not by the goroutine that
// publishes: with the fsync held, the next turns are published, reach the
// clients and the session answers; once the disk is back, a shutdown
// writes everything, in order, and a restart sees every event.
func TestPublishDoesNotWaitForTheDisk(t *testing.T) {
	dir := t.TempDir()
	st, err := sessionstore.New(dir, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	disk := newHeldDisk(t)
	st.SyncFile = disk.sync
	s := unstartedSessions(t, st)
	c, err := s.GetOrCreate("", "sebastian")
	if err != nil {
		t.Fatal(err)
	}
	sub, err := c.Stream().Subscribe(0, nil, 1024)
	if err != nil {
		t.Fatal(err)
	}

	publishTurn(c, "first", 3)
	<-disk.entered // the writer is inside the fsync of the first turn's end
	for i := range 3 {
		publishTurn(c, fmt.Sprint("more ", i), 20)
	}
	// Everything reached the client while the disk held the fsync.
	want := c.Stream().Events(0)
	if n := len(want); n != 5+3*22 {
		t.Fatalf("published %d events", n)
	}
	for i, ev := range want {
		if got := <-sub.C; got != ev {
			t.Fatalf("client event %d: %s, want %s", i, got.Line, ev.Line)
		}
	}
	// The session's lock is free: its history is there.
	if h := c.History(); len(h) != 4 || h[3].Content != "more 2" {
		t.Fatalf("history while the disk is held: %v", h)
	}
	logPath := filepath.Join(st.SessionDir(c.Person, c.ID), "events.ndjson")
	if b, _ := os.ReadFile(logPath); bytes.Contains(b, []byte("more 2")) {
		t.Fatal("the last turn is on disk while the writer is held in an earlier fsync")
	}

	disk.open()
	s.Close() // drains the writer
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	var wantLog []byte
	for _, ev := range want {
		wantLog = append(wantLog, record(ev).Encode()...)
	}
	if !bytes.Equal(b, wantLog) {
		t.Fatalf("log after shutdown:\n%s\nwant:\n%s", b, wantLog)
	}

	s2 := unstartedSessions(t, st)
	defer s2.Close()
	c2, err := s2.Get(c.ID, "sebastian")
	if err != nil {
		t.Fatal(err)
	}
	got := c2.Stream().Events(0)
	if len(got) != len(want) {
		t.Fatalf("after restart %d events, want %d", len(got), len(want))
	}
	for i := range got {
		if !bytes.Equal(got[i].Line, want[i].Line) {
			t.Fatalf("after restart event %d: %s, want %s", i, got[i].Line, want[i].Line)
		}
	}
	if info := c2.Info(); info.Title != "first" {
		t.Fatalf("index entry after restart: %+v", info)
	}
}

// A compaction is queued in order with the events around it and done by
// the log writer, from the file: what was published before it is
// compacted, what came after is appended to the new file, the stream
// drops the same events at its next tidy, and the size the store reckons
// is the file's.
func TestLogWriterCompactsInOrder(t *testing.T) {
	st, err := sessionstore.New(t.TempDir(), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	disk := newHeldDisk(t)
	st.SyncFile = disk.sync
	l, err := st.Open("sebastian", "s")
	if err != nil {
		t.Fatal(err)
	}
	s := NewStream(func(ev *Event) { l.Append(record(ev)) })
	turn := func(n int) {
		s.publishJSON(clientevent.TurnStart{Type: "turn_start", Message: fmt.Sprint("m", n)}, true, false)
		s.publishJSON(clientevent.CLI{Type: "cli", Event: []byte(`{"n":1}`)}, false, false)
		s.publishJSON(clientevent.Text{Type: "text", Delta: "answer"}, false, false)
		s.publishJSON(clientevent.Done{Type: "done", SessionID: "s"}, false, true)
	}
	for n := range 4 {
		turn(n)
	}
	l.Compact(compactRecords(3))
	s.trimUpTo(3)
	turn(4)
	s.tidy()
	disk.open()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	path := filepath.Join(st.SessionDir("sebastian", "s"), "events.ndjson")
	got, err := st.ReadLog(path)
	if err != nil {
		t.Fatal(err)
	}
	want := s.Events(0)
	if len(want) != 4*3+1+4 || len(got) != len(want) {
		t.Fatalf("log holds %d events, the stream %d", len(got), len(want))
	}
	for i := range got {
		if !bytes.Equal(got[i].Line, want[i].Line) {
			t.Fatalf("event %d: %s, want %s", i, got[i].Line, want[i].Line)
		}
	}
	if fi, _ := os.Stat(path); fi.Size() != l.Bytes() {
		t.Fatalf("file has %d bytes, the store reckons %d", fi.Size(), l.Bytes())
	}
}
