package sessionstore

import (
	"bytes"
	"fmt"
	"os"
	"testing"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/clitest"
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
	l, err := st.Open("sebastian", id)
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
	return recs, st.LogPath("sebastian", id)
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
	if err := st.SaveIndex("sebastian", "a", map[string]string{"id": "a"}); err != nil {
		t.Fatal(err)
	}
	writeLog(t, st, "no-index", 4)
	saved, err := st.Load()
	if err != nil || len(saved) != 1 || saved[0].ID != "a" || string(saved[0].Index) != `{"id":"a"}` {
		t.Fatalf("load: %+v, %v", saved, err)
	}
	records, err := st.ReadLog(st.LogPath(saved[0].Person, saved[0].ID))
	if err != nil || len(records) != 4 {
		t.Fatalf("read log: %d records, %v", len(records), err)
	}
	for i, r := range records {
		if !equal(r, recs[i]) {
			t.Fatalf("record %d: %+v, want %+v", i, r, recs[i])
		}
	}
	if err := st.Remove("sebastian", "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(st.SessionDir("sebastian", "a")); !os.IsNotExist(err) {
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
	l, err := st.Open("sebastian", "s")
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
	got, err := st.ReadLog(st.LogPath("sebastian", "s"))
	want := append(kept, later)
	if err != nil || len(got) != len(want) {
		t.Fatalf("log holds %d records (%v), want %d", len(got), err, len(want))
	}
	for i := range got {
		if !equal(got[i], want[i]) {
			t.Fatalf("record %d: %s, want %s", i, got[i].Line, want[i].Line)
		}
	}
	if fi, _ := os.Stat(st.LogPath("sebastian", "s")); fi.Size() != l.Bytes() {
		t.Fatalf("file has %d bytes, the log reckons %d", fi.Size(), l.Bytes())
	}
	if b, _ := os.ReadFile(st.SessionDir("sebastian", "s") + "/meta.json"); string(b) != `{"n":2}` {
		t.Fatalf("index entry %s", b)
	}
}

// A parked log has written and fsynced everything queued, holds no file
// open, and starts again with the next piece of work; Records reads back
// everything queued before it, whether the writer ran or was parked.
func TestParkAndRecords(t *testing.T) {
	st, _ := New(t.TempDir(), zerolog.Nop())
	var syncs int
	st.SyncFile = func(f *os.File) error { syncs++; return f.Sync() }
	l, err := st.Open("sebastian", "p")
	if err != nil {
		t.Fatal(err)
	}
	path := st.LogPath("sebastian", "p")
	var all []Record
	appendN := func(n int) {
		for range n {
			seq := int64(len(all) + 1)
			all = append(all, rec(seq, int(seq+3)/4, false))
			l.Append(all[len(all)-1])
		}
	}
	check := func(when string) {
		t.Helper()
		got, err := l.Records()
		if err != nil || len(got) != len(all) {
			t.Fatalf("%s: read %d records (%v), want %d", when, len(got), err, len(all))
		}
		for i := range got {
			if !equal(got[i], all[i]) {
				t.Fatalf("%s: record %d: %s, want %s", when, i, got[i].Line, all[i].Line)
			}
		}
	}
	appendN(5)
	check("running")
	if err := l.Park(); err != nil {
		t.Fatal(err)
	}
	if syncs != 1 {
		t.Fatalf("park fsynced %d times, want 1", syncs)
	}
	if n := clitest.OpenFiles(t, path); n != 0 {
		t.Fatalf("a parked log holds its file open (%d)", n)
	}
	if b, _ := os.ReadFile(path); bytes.Count(b, []byte("\n")) != 5 {
		t.Fatalf("parked log on disk: %s", b)
	}
	check("parked")
	if err := l.Park(); err != nil { // nothing written since: nothing to do
		t.Fatal(err)
	}
	appendN(3)
	check("started again")
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := st.ReadLog(path)
	if err != nil || len(got) != 8 {
		t.Fatalf("after close: %d records, %v", len(got), err)
	}
	if _, err := l.Records(); err != ErrClosed {
		t.Fatalf("records after close: %v", err)
	}
	if err := l.Park(); err != ErrClosed {
		t.Fatalf("park after close: %v", err)
	}
}

// A log whose file cannot be written does not claim to hold its records:
// Park says so, and the session keeps its events in memory.
func TestParkReportsAFailedLog(t *testing.T) {
	st, _ := New(t.TempDir(), zerolog.Nop())
	if err := os.MkdirAll(st.LogPath("sebastian", "f"), 0o700); err != nil { // a folder where the file goes
		t.Fatal(err)
	}
	l, err := st.Open("sebastian", "f")
	if err == nil {
		t.Fatal("opened a log that is a folder")
	}
	l.Append(rec(1, 1, false))
	if err := l.Park(); err == nil {
		t.Fatal("park of a failed log reported it whole")
	}
	_ = l.Close()
}

// A compaction runs on the writer, from the file: while it is held (a
// slow disk), appends return at once; what was appended before it is
// compacted, what came after is appended to the new file, and the sizes
// the log reckons are the file's.
func TestCompactOnTheWriter(t *testing.T) {
	st, _ := New(t.TempDir(), zerolog.Nop())
	entered, release := make(chan struct{}), make(chan struct{})
	st.ReplaceFile = func(path string, b []byte) error {
		close(entered)
		<-release
		return os.WriteFile(path, b, 0o600)
	}
	l, err := st.Open("sebastian", "c")
	if err != nil {
		t.Fatal(err)
	}
	var all []Record
	for i := int64(1); i <= 8; i++ {
		all = append(all, rec(i, int(i+3)/4, i%4 == 0))
		l.Append(all[i-1])
	}
	var kept []Record
	l.Compact(func(records []Record) []Record {
		for _, r := range records {
			if r.Terminal || r.Seq%4 == 1 { // each turn's first and last

				kept = append(kept, r)
			}
		}
		return kept
	})
	if _, pending := l.Compacted(); !pending {
		t.Fatal("a queued compaction is not reported pending")
	}
	<-entered
	var later []Record
	for i := int64(9); i <= 40; i++ {
		later = append(later, rec(i, int(i+3)/4, i%4 == 0))
		l.Append(later[len(later)-1])
	}
	close(release)
	got, err := l.Records()
	want := append(append([]Record(nil), kept...), later...)
	if err != nil || len(got) != len(want) || len(kept) != 4 {
		t.Fatalf("log holds %d records (%v), want %d (%d kept)", len(got), err, len(want), len(kept))
	}
	for i := range got {
		if !equal(got[i], want[i]) {
			t.Fatalf("record %d: %s, want %s", i, got[i].Line, want[i].Line)
		}
	}
	size, pending := l.Compacted()
	var keptSize int64
	for _, r := range kept {
		keptSize += int64(len(r.Encode()))
	}
	if pending || size != keptSize {
		t.Fatalf("compacted size %d (pending %v), want %d", size, pending, keptSize)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(st.LogPath("sebastian", "c")); fi.Size() != l.Bytes() {
		t.Fatalf("file has %d bytes, the log reckons %d", fi.Size(), l.Bytes())
	}
}
