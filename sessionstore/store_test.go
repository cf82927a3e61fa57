package sessionstore

import (
	"bytes"
	"fmt"
	"os"
	"testing"

	"github.com/rs/zerolog"
)

// rec is record seq of turn: a text, or the turn's done when terminal.
func rec(seq int64, turn int, terminal bool) Record {
	typ, body := "text", fmt.Sprintf(`"delta":"t%d\n\"q\""`, seq)
	if terminal {
		typ, body = "done", `"session_id":"s"`
	}
	line := fmt.Sprintf(`{"seq":%d,"type":%q,%s}`, seq, typ, body)
	return Record{Seq: seq, Type: typ, Turn: turn, Terminal: terminal, Line: []byte(line)}
}

// writeLog writes n records through a Log and returns them and the path.
func writeLog(tb testing.TB, st *Store, id string, n int) ([]Record, string) {
	tb.Helper()
	l, err := st.Open(id)
	if err != nil {
		tb.Fatal(err)
	}
	var recs []Record
	for i := 1; i <= n; i++ {
		recs = append(recs, rec(int64(i), (i+3)/4, i%4 == 0))
		l.Append(recs[len(recs)-1])
	}
	if err := l.Close(); err != nil {
		tb.Fatal(err)
	}
	return recs, st.LogPath(id)
}

func equal(a, b Record) bool {
	return a.Seq == b.Seq && a.Type == b.Type && a.Turn == b.Turn && a.Terminal == b.Terminal && bytes.Equal(a.Line, b.Line)
}

func TestRoundTripAndTornWrites(t *testing.T) {
	st, err := New(t.TempDir(), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	recs, path := writeLog(t, st, "s1", 12)
	whole, _ := os.ReadFile(path)

	// A crash can cut the file anywhere: every earlier record survives,
	// the torn one is dropped, and the file is repaired for appending.
	for cut := 0; cut <= len(whole); cut++ {
		if err := os.WriteFile(path, whole[:cut], 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := st.ReadLog(path)
		if err != nil {
			t.Fatal(err)
		}
		complete := bytes.Count(whole[:cut], []byte("\n"))
		if len(got) != complete {
			t.Fatalf("cut at %d: %d records, want %d", cut, len(got), complete)
		}
		for i, r := range got {
			if !equal(r, recs[i]) {
				t.Fatalf("cut at %d: record %d differs: %+v vs %+v", cut, i, r, recs[i])
			}
		}
		if fi, _ := os.Stat(path); fi.Size() != int64(bytes.LastIndexByte(whole[:cut], '\n')+1) {
			t.Fatalf("cut at %d: file not truncated to the last whole line (%d)", cut, fi.Size())
		}
	}
}

// A bad line in the middle (garbage, a line without its seq first, a seq
// out of order) cuts the log there: what came before is kept.
func TestBadLineInTheMiddleKeepsPrefix(t *testing.T) {
	st, _ := New(t.TempDir(), zerolog.Nop())
	for _, bad := range []string{
		"garbage\n",
		`{"t":1,"e":{"type":"text","seq":4}}` + "\n",
		string(rec(2, 1, false).Encode()),
	} {
		_, path := writeLog(t, st, "s2", 8)
		b, _ := os.ReadFile(path)
		lines := bytes.SplitAfter(b, []byte("\n"))
		lines[3] = []byte(bad)
		_ = os.WriteFile(path, bytes.Join(lines, nil), 0o600)
		got, err := st.ReadLog(path)
		if err != nil || len(got) != 3 {
			t.Fatalf("bad line 4 %q: %d records, %v", bad, len(got), err)
		}
		if fi, _ := os.Stat(path); fi.Size() != int64(len(bytes.Join(lines[:3], nil))) {
			t.Fatalf("bad line 4 %q: file not cut there (%d bytes)", bad, fi.Size())
		}
		_ = os.Remove(path)
	}
}

func TestLoadSkipsASessionWithoutIndex(t *testing.T) {
	st, _ := New(t.TempDir(), zerolog.Nop())
	recs, _ := writeLog(t, st, "a", 4)
	if err := st.SaveIndex("a", map[string]string{"id": "a"}); err != nil {
		t.Fatal(err)
	}
	writeLog(t, st, "no-index", 4)
	saved, err := st.Load()
	if err != nil || len(saved) != 1 || saved[0].ID != "a" || string(saved[0].Index) != `{"id":"a"}` || len(saved[0].Records) != 4 {
		t.Fatalf("load: %+v, %v", saved, err)
	}
	for i, r := range saved[0].Records {
		if !equal(r, recs[i]) {
			t.Fatalf("record %d: %+v, want %+v", i, r, recs[i])
		}
	}
	if err := st.Remove("a"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(st.SessionDir("a")); !os.IsNotExist(err) {
		t.Fatal("a removed session's files remain")
	}
}

// A compaction is queued in order with the records around it: what was
// appended before it is replaced, what came after is appended to the new
// file, the last index entry queued is the one saved, and the size the
// log reckons is the file's.
func TestLogRewritesInOrder(t *testing.T) {
	st, _ := New(t.TempDir(), zerolog.Nop())
	held := make(chan struct{})
	st.SyncFile = func(f *os.File) error { <-held; return f.Sync() }
	l, err := st.Open("s")
	if err != nil {
		t.Fatal(err)
	}
	var all []Record
	for i := int64(1); i <= 8; i++ {
		all = append(all, rec(i, int(i+3)/4, i%4 == 0))
		l.Append(all[i-1])
	}
	kept := []Record{all[0], all[3], all[4], all[7]}
	l.Rewrite(kept)
	l.SaveIndex(map[string]int{"n": 1})
	later := rec(9, 3, false)
	l.Append(later)
	l.SaveIndex(map[string]int{"n": 2})
	close(held)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	l.Append(rec(10, 3, false)) // after Close: nothing
	got, err := st.ReadLog(st.LogPath("s"))
	want := append(kept, later)
	if err != nil || len(got) != len(want) {
		t.Fatalf("log holds %d records (%v), want %d", len(got), err, len(want))
	}
	for i := range got {
		if !equal(got[i], want[i]) {
			t.Fatalf("record %d: %s, want %s", i, got[i].Line, want[i].Line)
		}
	}
	if fi, _ := os.Stat(st.LogPath("s")); fi.Size() != l.Bytes() {
		t.Fatalf("file has %d bytes, the log reckons %d", fi.Size(), l.Bytes())
	}
	if b, _ := os.ReadFile(st.SessionDir("s") + "/meta.json"); string(b) != `{"n":2}` {
		t.Fatalf("index entry %s", b)
	}
}
