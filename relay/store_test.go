package relay

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/clientevent"
	"github.com/majorhq/major/supervisor"
)

func writeLog(tb testing.TB, st *Store, id string, n int) ([]*Event, string) {
	tb.Helper()
	if err := st.saveMeta(meta{ID: id, Person: "sebastian", Created: time.Now(), LastActivity: time.Now()}); err != nil {
		tb.Fatal(err)
	}
	l, err := st.openLog(id)
	if err != nil {
		tb.Fatal(err)
	}
	s := NewStream(l.append)
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
	if err := l.close(); err != nil {
		tb.Fatal(err)
	}
	return evs, filepath.Join(st.sessionDir(id), "events.ndjson")
}

func TestStoreRoundTripAndTornWrites(t *testing.T) {
	st, err := NewStore(t.TempDir(), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	evs, path := writeLog(t, st, "s1", 12)
	whole, _ := os.ReadFile(path)

	// A crash can cut the file anywhere: every earlier event survives, the
	// torn one is dropped, and the file is repaired for appending.
	for cut := 0; cut <= len(whole); cut++ {
		if err := os.WriteFile(path, whole[:cut], 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := st.readLog(path)
		if err != nil {
			t.Fatal(err)
		}
		complete := bytes.Count(whole[:cut], []byte("\n"))
		if len(got) != complete {
			t.Fatalf("cut at %d: %d events, want %d", cut, len(got), complete)
		}
		for i, ev := range got {
			if !bytes.Equal(ev.Line, evs[i].Line) || !bytes.Equal(ev.Compat, evs[i].Compat) ||
				ev.Turn != evs[i].Turn || ev.Terminal != evs[i].Terminal || ev.Type != evs[i].Type {
				t.Fatalf("cut at %d: event %d differs: %s vs %s", cut, i, ev.Line, evs[i].Line)
			}
		}
		if fi, _ := os.Stat(path); fi.Size() != int64(bytes.LastIndexByte(whole[:cut], '\n')+1) {
			t.Fatalf("cut at %d: file not truncated to the last whole line (%d)", cut, fi.Size())
		}
	}
}

func TestStoreCorruptMiddleKeepsPrefix(t *testing.T) {
	st, _ := NewStore(t.TempDir(), zerolog.Nop())
	_, path := writeLog(t, st, "s2", 8)
	b, _ := os.ReadFile(path)
	lines := bytes.SplitAfter(b, []byte("\n"))
	lines[3] = []byte("garbage\n")
	_ = os.WriteFile(path, bytes.Join(lines, nil), 0o600)
	got, err := st.readLog(path)
	if err != nil || len(got) != 3 {
		t.Fatalf("corrupt line 4: %d events, %v", len(got), err)
	}
}

func TestStoreLoadExpireAndCompact(t *testing.T) {
	st, _ := NewStore(t.TempDir(), zerolog.Nop())
	writeLog(t, st, "fresh", 4)
	writeLog(t, st, "old", 4)
	old := meta{ID: "old", Person: "petra", Created: time.Now().Add(-72 * time.Hour), LastActivity: time.Now().Add(-48 * time.Hour)}
	if err := st.saveMeta(old); err != nil {
		t.Fatal(err)
	}
	_ = os.MkdirAll(filepath.Join(st.dir, "sessions", "broken"), 0o700) // no index entry
	loaded, err := st.load()
	if err != nil || len(loaded) != 2 {
		t.Fatalf("load: %d sessions, %v", len(loaded), err)
	}
	kept := st.expire(loaded, 24*time.Hour, time.Now())
	if len(kept) != 1 || kept[0].meta.ID != "fresh" {
		t.Fatalf("expire kept %v", kept)
	}
	if _, err := os.Stat(st.sessionDir("old")); !os.IsNotExist(err) {
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
	s.compact(func(e []*Event) []*Event { return compactEvents(e, 2) })
	sub, _ := s.Subscribe(4, nil, 1)
	if sub.Replay[0].Seq != 4+2 { // seq 5 (turn 2's cli) is gone
		t.Fatalf("replay after compaction starts at %d", sub.Replay[0].Seq)
	}
	sub.Close()
}

func TestSessionsExpire(t *testing.T) {
	dir := t.TempDir()
	st, _ := NewStore(dir, zerolog.Nop())
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
	if _, err := os.Stat(st.sessionDir(old.ID)); !os.IsNotExist(err) {
		t.Fatal("old session's state still on disk")
	}
	if _, err := s.Get(fresh.ID, "petra"); err != nil {
		t.Fatal("fresh session expired")
	}
}
