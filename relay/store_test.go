package relay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/clientevent"
	"github.com/majorhq/major/sessionstore"
	"github.com/majorhq/major/supervisor"
	"github.com/majorhq/major/usage"
)

func writeLog(tb testing.TB, st *sessionstore.Store, person, id string, n int) ([]*Event, string) {
	tb.Helper()
	if err := st.SaveIndex(person, id, meta{ID: id, Person: person, Created: time.Now(), LastActivity: time.Now()}); err != nil {
		tb.Fatal(err)
	}
	l, err := st.Open(person, id)
	if err != nil {
		tb.Fatal(err)
	}
	s := NewStream(func(ev *Event) { l.Append(record(ev)) })
	var evs []*Event
	for i := 0; i < n; i++ {
		switch {
		case i%4 == 0:
			evs = append(evs, s.publishJSON(clientevent.TurnStart{Type: "turn_start", Message: fmt.Sprint("m", i)}, true, false))
		case i%4 == 3:
			evs = append(evs, s.publishJSON(clientevent.Done{Type: "done", SessionID: id}, false, true))
		default:
			evs = append(evs, s.publishJSON(clientevent.Text{Type: "text", Delta: fmt.Sprintf("t%d\n\"q\"", i)}, false, false))
		}
	}
	if err := l.Close(); err != nil {
		tb.Fatal(err)
	}
	return evs, filepath.Join(st.SessionDir(person, id), "events.ndjson")
}

// Events go to the log and come back the same, their compat lines too.
func TestEventsRoundTripThroughTheStore(t *testing.T) {
	st, err := sessionstore.New(t.TempDir(), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	evs, path := writeLog(t, st, "sebastian", "s1", 12)
	recs, err := st.ReadLog(path)
	if err != nil || len(recs) != len(evs) {
		t.Fatalf("read %d records, %v", len(recs), err)
	}
	for i, r := range recs {
		ev := eventOf(r, nil)
		if !bytes.Equal(ev.Line, evs[i].Line) || !bytes.Equal(ev.Compat, evs[i].Compat) || ev.Seq != evs[i].Seq ||
			ev.Turn != evs[i].Turn || ev.Terminal != evs[i].Terminal || ev.Type != evs[i].Type {
			t.Fatalf("event %d differs: %s vs %s", i, ev.Line, evs[i].Line)
		}
	}
}

func TestStoreLoadExpireAndCompact(t *testing.T) {
	st, _ := sessionstore.New(t.TempDir(), zerolog.Nop())
	writeLog(t, st, "sebastian", "fresh", 4)
	writeLog(t, st, "petra", "old", 4)
	old := meta{ID: "old", Person: "petra", Created: time.Now().Add(-72 * time.Hour), LastActivity: time.Now().Add(-48 * time.Hour)}
	if err := st.SaveIndex("petra", old.ID, old); err != nil {
		t.Fatal(err)
	}
	_ = os.MkdirAll(st.SessionDir("sebastian", "broken"), 0o700) // no index entry
	// An index entry that is not a session's: another id, no valid
	// person, another person than the folder's.
	if err := st.SaveIndex("sebastian", "stray", meta{ID: "other", Person: "sebastian"}); err != nil {
		t.Fatal(err)
	}
	if err := st.SaveIndex("sebastian", "nobody", meta{ID: "nobody", Person: "../x"}); err != nil {
		t.Fatal(err)
	}
	if err := st.SaveIndex("sebastian", "petras", meta{ID: "petras", Person: "petra"}); err != nil {
		t.Fatal(err)
	}
	loaded, err := loadSessions(st, zerolog.Nop())
	if err != nil || len(loaded) != 2 {
		t.Fatalf("load: %d sessions, %v", len(loaded), err)
	}
	if n := len(readEvents(st, zerolog.Nop(), "sebastian", "fresh", nil)) + len(readEvents(st, zerolog.Nop(), "petra", "old", nil)); n != 8 {
		t.Fatalf("read %d events, want 8", n)
	}
	kept := expire(st, zerolog.Nop(), loaded, 24*time.Hour, time.Now())
	if len(kept) != 1 || kept[0].meta.ID != "fresh" {
		t.Fatalf("expire kept %v", kept)
	}
	if _, err := os.Stat(st.SessionDir("petra", "old")); !os.IsNotExist(err) {
		t.Fatal("expired session's files remain")
	}

	var evs []*Event
	for turn := 1; turn <= 5; turn++ {
		evs = append(evs,
			newEvent(int64(len(evs)+1), turn, "turn_start", []byte(`{"type":"turn_start","message":"x"}`), false),
			newEvent(int64(len(evs)+2), turn, "cli", []byte(`{"type":"cli","event":{}}`), false),
			newEvent(int64(len(evs)+3), turn, "done", []byte(`{"type":"done","session_id":"s"}`), true))
	}
	c := compactEvents(evs, 2)
	cli := 0
	for _, ev := range c {
		if ev.Type == "cli" {
			cli++
			if ev.Turn < 4 {
				t.Fatalf("kept a cli event of turn %d", ev.Turn)
			}
		}
	}
	if cli != 2 || len(c) != 12 {
		t.Fatalf("compacted to %d events (%d cli)", len(c), cli)
	}
	// Replay across the gap left by compaction.
	s := NewStream(nil)
	s.restore(evs)
	s.trimUpTo(3)
	s.tidy()
	sub, _ := s.Subscribe(4, nil, 1)
	if sub.Replay[0].Seq != 4+2 { // seq 5 (turn 2's cli) is gone
		t.Fatalf("replay after compaction starts at %d", sub.Replay[0].Seq)
	}
	sub.Close()
}

func TestSessionsExpire(t *testing.T) {
	dir := t.TempDir()
	st, _ := sessionstore.New(dir, zerolog.Nop())
	now := time.Now()
	clock := func() time.Time { return now }
	launch := LauncherFunc(func(p SessionParams) CLI {
		return supervisor.NewCLI(supervisor.CLIConfig{ID: p.ID, Person: p.Person, Sink: p.Sink})
	})
	s, err := NewRegistry(RegistryConfig{Launcher: launch, Store: st, TTL: time.Hour, Logger: zerolog.Nop(), Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	old, _ := s.GetOrCreate("", "sebastian")
	now = now.Add(2 * time.Hour)
	fresh, _ := s.GetOrCreate("", "petra")
	if n := s.Expire(); n != 1 {
		t.Fatalf("expired %d sessions, want 1", n)
	}
	if _, err := s.Get(old.ID, "sebastian"); err == nil {
		t.Fatal("old session still there")
	}
	if _, err := os.Stat(st.SessionDir(old.Person, old.ID)); !os.IsNotExist(err) {
		t.Fatal("old session's state still on disk")
	}
	if _, err := s.Get(fresh.ID, "petra"); err != nil {
		t.Fatal("fresh session expired")
	}
}

// A released person's sessions leave the registry but stay on disk, with
// their usage; none of theirs is created meanwhile; others are not
// touched; adopted again, their sessions come back with their events.
func TestReleaseAndAdoptAPerson(t *testing.T) {
	dir := t.TempDir()
	st, _ := sessionstore.New(dir, zerolog.Nop())
	launch := LauncherFunc(func(p SessionParams) CLI {
		return supervisor.NewCLI(supervisor.CLIConfig{ID: p.ID, Person: p.Person, Sink: p.Sink})
	})
	s, err := NewRegistry(RegistryConfig{Launcher: launch, Store: st, Metered: true, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a, _ := s.GetOrCreate("", "sebastian")
	b, _ := s.GetOrCreate("", "sebastian")
	p, _ := s.GetOrCreate("", "petra")
	a.mu.Lock()
	a.stream.publishJSON(clientevent.TurnStart{Type: "turn_start", Message: "kept words"}, true, false)
	a.stream.publishJSON(clientevent.Done{Type: "done", SessionID: a.ID}, false, true)
	a.mu.Unlock()
	s.Charge("sebastian", a.ID, time.Now(), usage.Day{CostUSD: 1.5})

	if err := s.Release(context.Background(), "sebastian"); err != nil {
		t.Fatal(err)
	}
	if got := s.List("sebastian"); len(got) != 0 {
		t.Fatalf("released, sebastian still has %d sessions", len(got))
	}
	if _, err := s.GetOrCreate("", "sebastian"); !errors.Is(err, ErrMoving) {
		t.Fatalf("a session of a released person: %v", err)
	}
	if _, err := s.Get(a.ID, "sebastian"); !errors.Is(err, ErrMoving) || !s.Moving("sebastian") || s.Moving("petra") {
		t.Fatalf("a released person's session: %v", err)
	}
	if got := s.Usage("sebastian", 1).TodayUSD; got != 0 {
		t.Fatalf("released, sebastian's usage is still counted here: %v", got)
	}
	if _, err := s.Get(p.ID, "petra"); err != nil {
		t.Fatalf("petra's session: %v", err)
	}
	for _, c := range []*Session{a, b} {
		if _, err := os.Stat(filepath.Join(st.SessionDir("sebastian", c.ID), "meta.json")); err != nil {
			t.Fatalf("the released session's index entry: %v", err)
		}
	}

	n, err := s.Adopt("sebastian")
	if err != nil || n != 2 {
		t.Fatalf("adopted %d sessions, %v", n, err)
	}
	again, err := s.Get(a.ID, "sebastian")
	if err != nil {
		t.Fatal(err)
	}
	if h := again.History(); len(h) != 1 || h[0].Content != "kept words" {
		t.Fatalf("the adopted session's history: %+v", h)
	}
	if got := s.Usage("sebastian", 1).TodayUSD; got != 1.5 {
		t.Fatalf("adopted, sebastian spent %v today, want 1.5", got)
	}
	if n, err := s.Adopt("sebastian"); err != nil || n != 0 {
		t.Fatalf("adopted again: %d, %v", n, err)
	}
	if _, err := s.GetOrCreate("", "sebastian"); err != nil || s.Moving("sebastian") {
		t.Fatalf("a new session after the adoption: %v", err)
	}
}
