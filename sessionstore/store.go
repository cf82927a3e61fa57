// Package sessionstore is how a session reaches disk and comes back: the
// state directory's index entries and event logs, the writer goroutine
// that owns each log file (and that stops, closing the file, while its
// session is idle), torn and corrupt lines at load, and the compaction and
// atomic replacement of a log.
//
// It knows records (an event's seq, type, turn and line) and index entries
// (any JSON value), not what they mean: which events a compaction keeps,
// what an index entry holds and when a session expires are the session
// core's (package relay). It must not import relay or decode an event's
// body.
package sessionstore

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/internal/atomicfile"
	"github.com/majorhq/major/personstate"
)

// Store keeps the session index and every session's event log on disk,
// in the folder of the session's person (personstate):
//
//	persons/<person>/sessions/<id>/meta.json     the index entry, replaced atomically
//	persons/<person>/sessions/<id>/events.ndjson the event log, append-only
//
// Why append-only files rather than an embedded database: the log is
// written in order and read back whole, which is exactly what a file does,
// with no dependency and nothing to tune. Each event is one line written
// in order by the session's log writer, never by the goroutine that
// publishes it; the file is fsynced at the end of every turn and on close.
// A crash loses the events the writer had not written yet and can leave a
// torn last line, which ReadLog drops; the lines before it are never
// rewritten in place. Compaction writes a new file and renames it over
// the old one.
type Store struct {
	dir string
	log zerolog.Logger
	// SyncFile fsyncs a session's log (nil: (*os.File).Sync), and
	// ReplaceFile puts a compacted log in place (nil: atomicfile.Write);
	// tests hold them to stand for a slow disk.
	SyncFile    func(*os.File) error
	ReplaceFile func(path string, b []byte) error
}

// New opens (creating) a state directory.
func New(dir string, log zerolog.Logger) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	return &Store{dir: dir, log: log}, nil
}

// Dir is the state directory.
func (s *Store) Dir() string { return s.dir }

// SessionDir is where person's session id's files are.
func (s *Store) SessionDir(person, id string) string {
	return personstate.File(s.dir, person, personstate.SessionsDir, id)
}

// LogPath is person's session id's event log.
func (s *Store) LogPath(person, id string) string {
	return filepath.Join(s.SessionDir(person, id), "events.ndjson")
}

// SaveIndex replaces person's session id's index entry (entry as JSON)
// atomically: write, fsync, rename.
func (s *Store) SaveIndex(person, id string, entry any) error {
	return saveIndex(s.SessionDir(person, id), entry)
}

func saveIndex(dir string, entry any) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	b, err := json.Marshal(entry)
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(dir, "meta.json"), b)
}

// Remove deletes person's session id's files.
func (s *Store) Remove(person, id string) error {
	return os.RemoveAll(s.SessionDir(person, id))
}

// Record is one event as the log keeps it: its seq and type, its turn,
// whether it ends the turn, and the line clients get, which starts with
// {"seq":<Seq>, and is stored as is.
type Record struct {
	Seq      int64
	Type     string
	Turn     int
	Terminal bool
	Line     []byte
}

// stored is a record's line in the file.
type stored struct {
	Turn     int             `json:"t"`
	Terminal bool            `json:"x,omitempty"`
	Line     json.RawMessage `json:"e"`
}

func (r *Record) encode(b *bytes.Buffer) {
	b.WriteString(`{"t":`)
	b.WriteString(strconv.Itoa(r.Turn))
	if r.Terminal {
		b.WriteString(`,"x":true`)
	}
	b.WriteString(`,"e":`)
	b.Write(r.Line)
	b.WriteString("}\n")
}

// size is the length of the record's line in the file, without encoding it.
func (r *Record) size() int64 {
	n := len(`{"t":`) + len(strconv.Itoa(r.Turn)) + len(`,"e":`) + len(r.Line) + len("}\n")
	if r.Terminal {
		n += len(`,"x":true`)
	}
	return int64(n)
}

// Encode is the record's line in the file.
func (r Record) Encode() []byte {
	var b bytes.Buffer
	b.Grow(int(r.size()))
	r.encode(&b)
	return b.Bytes()
}

// decode reads a record from its line in the file.
func decode(line []byte) (Record, error) {
	var st stored
	if err := json.Unmarshal(line, &st); err != nil {
		return Record{}, err
	}
	var head struct {
		Seq  int64  `json:"seq"`
		Type string `json:"type"`
	}
	if err := json.Unmarshal(st.Line, &head); err != nil || head.Seq <= 0 || head.Type == "" {
		return Record{}, errors.New("bad event line")
	}
	if !bytes.HasPrefix(st.Line, []byte(`{"seq":`+strconv.FormatInt(head.Seq, 10)+`,`)) {
		return Record{}, errors.New("event line does not start with its seq")
	}
	return Record{Seq: head.Seq, Type: head.Type, Turn: st.Turn, Terminal: st.Terminal, Line: st.Line}, nil
}

// Saved is one session's index entry as saved, with the person whose
// folder it is in; its log is read with ReadLog, one session at a time.
type Saved struct {
	Person string
	ID     string
	Index  json.RawMessage
}

// Load reads every person's sessions' index entries. A session without a
// readable index entry is skipped.
func (s *Store) Load() ([]Saved, error) {
	persons, err := personstate.List(s.dir)
	if err != nil {
		return nil, err
	}
	var out []Saved
	for _, p := range persons {
		saved, err := s.LoadPerson(p)
		if err != nil {
			return nil, err
		}
		out = append(out, saved...)
	}
	return out, nil
}

// LoadPerson reads the index entries of person's sessions (a person
// taken in while the server runs).
func (s *Store) LoadPerson(person string) ([]Saved, error) {
	entries, err := os.ReadDir(personstate.File(s.dir, person, personstate.SessionsDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Saved
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dir := s.SessionDir(person, e.Name())
		index, err := os.ReadFile(filepath.Join(dir, "meta.json"))
		if err != nil {
			s.log.Warn().Err(err).Str("dir", dir).Msg("session without a readable index entry; skipped")
			continue
		}
		out = append(out, Saved{Person: person, ID: e.Name(), Index: index})
	}
	return out, nil
}

// ReadLog reads the log at path. It ends at a torn last line or at a
// corrupt or out-of-order one, and truncates the file there, so the next
// append follows the last good line. Only while no Log of the session is
// open: the server reads each log so once, at start.
func (s *Store) ReadLog(path string) ([]Record, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0o600)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	records, good, problem, err := readRecords(f)
	if err != nil || problem == "" {
		return records, err
	}
	if problem == tornLine {
		s.log.Warn().Str("path", path).Int64("offset", good).Msg(problem)
	} else {
		s.log.Error().Str("path", path).Int64("offset", good).Msg(problem)
	}
	return records, f.Truncate(good)
}

const tornLine = "dropping a torn last event line"

// readRecords reads records from r up to its end, a torn last line or a
// corrupt or out-of-order one. good is the length of the whole lines
// read; problem, if not "", says why the reading stopped before the end.
func readRecords(r io.Reader) (records []Record, good int64, problem string, err error) {
	br := bufio.NewReaderSize(r, 1<<20)
	var lastSeq int64
	for {
		line, err := br.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			if len(line) > 0 {
				return records, good, tornLine, nil
			}
			return records, good, "", nil
		}
		if err != nil {
			return records, good, "", err
		}
		rec, err := decode(line)
		switch {
		case err != nil:
			// Only the end of the file can be torn; a bad line in the
			// middle is corruption: keep what came before, and say so.
			return records, good, "corrupt event line; the log is cut here", nil
		case rec.Seq <= lastSeq:
			return records, good, "event out of order; the log is cut here", nil
		}
		lastSeq = rec.Seq
		records = append(records, rec)
		good += int64(len(line))
	}
}

// Log is one session's log writer: the goroutine that owns the log file
// and the index entry. Append, SaveIndex, Rewrite and Compact only queue,
// so the CLI reader never waits on the disk while it holds the session's
// lock; the writer takes everything queued at once, writes it with one
// write call, fsyncs when a turn ended in it, and replaces the index
// entry. Park stops the writer and closes the file while the session is
// idle; the next piece of work starts it again.
//
// The queue is not bounded by a count: its records point at lines the
// session keeps in memory anyway, for replay. When the disk is slower
// than the CLI the queue grows and the writer catches up in bigger
// batches; the CLI is never slowed down by the disk.
type Log struct {
	path        string
	log         zerolog.Logger
	syncFile    func(*os.File) error
	replaceFile func(string, []byte) error

	mu      sync.Mutex
	wake    *sync.Cond
	pending []logOp
	size    int64 // the log's size once pending is written
	running bool  // a writer goroutine runs
	closing bool
	done    chan struct{} // closed when Close has finished
	result  error         // of the final flush, for Close
	// compacted is the log's size after its last compaction (0: none
	// yet); compacting, that one is queued or running.
	compacted  int64
	compacting bool

	// Owned by the writer goroutine while one runs, and by whoever holds
	// mu while none does.
	f     *os.File
	err   error // the log failed: later events are kept in memory only
	dirty bool  // written since the last fsync
	buf   bytes.Buffer
}

// logOp is one queued piece of disk work: a record to append, an index
// entry to save, a compacted log to put in place of the current one, the
// log to compact or read, or the writer to park.
type logOp struct {
	kind opKind
	rec  Record // opAppend
	// other is the index entry (opIndex), the records (opRewrite, a
	// []Record), what a compaction keeps (opCompact, a Keep), or where
	// the answer goes (opRead, a chan readResult; opPark, a chan error):
	// one field keeps the queue's elements small.
	other any
}

type opKind uint8

const (
	opAppend opKind = iota
	opIndex
	opRewrite
	opCompact
	opRead
	opPark
)

// Keep is what a compaction keeps of a log's records, in order.
type Keep func([]Record) []Record

type readResult struct {
	records []Record
	err     error
}

// ErrClosed answers work asked of a Log after Close.
var ErrClosed = errors.New("session log closed")

// Open starts the writer of person's session id's log. Should the file
// not open, the error is returned with a writer that still saves the
// index entry (the events are kept in memory only).
func (s *Store) Open(person, id string) (*Log, error) {
	l := &Log{
		path:        s.LogPath(person, id),
		log:         s.log.With().Str("session", id).Logger(),
		syncFile:    s.SyncFile,
		replaceFile: s.ReplaceFile,
		done:        make(chan struct{}),
	}
	if l.syncFile == nil {
		l.syncFile = (*os.File).Sync
	}
	if l.replaceFile == nil {
		l.replaceFile = atomicfile.Write
	}
	l.wake = sync.NewCond(&l.mu)
	err := l.open()
	if err != nil {
		l.err = err
	}
	return l, err
}

func (l *Log) open() error {
	if err := os.MkdirAll(filepath.Dir(l.path), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(l.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	l.f, l.size = f, st.Size()
	return nil
}

// queue adds op and starts the writer if none runs. After Close, work is
// dropped and a caller that waits for an answer gets ErrClosed.
func (l *Log) queue(op logOp) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closing {
		switch reply := op.other.(type) {
		case chan readResult:
			reply <- readResult{err: ErrClosed}
		case chan error:
			reply <- ErrClosed
		}
		return
	}
	switch op.kind {
	case opAppend:
		l.size += op.rec.size()
	case opRewrite:
		l.size = 0
		for _, r := range op.other.([]Record) {
			l.size += r.size()
		}
	case opCompact:
		l.compacting = true
	}
	l.pending = append(l.pending, op)
	if !l.running {
		l.running = true
		go l.run()
	}
	l.wake.Signal()
}

// Append queues one record; the writer fsyncs after a turn's last one.
// It never waits on the disk. After Close it does nothing.
func (l *Log) Append(r Record) { l.queue(logOp{kind: opAppend, rec: r}) }

// SaveIndex queues a replacement of the index entry (entry as JSON,
// encoded by the writer: entry must not change after the call).
func (l *Log) SaveIndex(entry any) { l.queue(logOp{kind: opIndex, other: entry}) }

// Rewrite queues the replacement of the log by records (a fork's copy).
// A caller that publishes events must hold its lock across the snapshot
// and this call, so no later event is queued before it.
func (l *Log) Rewrite(records []Record) { l.queue(logOp{kind: opRewrite, other: records}) }

// Compact queues a compaction: the writer reads the log as written so
// far, keeps what keep returns and puts that in its place, atomically;
// the records queued after the call are appended to the new file. keep
// runs on the writer's goroutine, with no lock of the caller's held.
func (l *Log) Compact(keep Keep) { l.queue(logOp{kind: opCompact, other: keep}) }

// Compacted is the log's size right after its last compaction (0: none
// yet), and whether a compaction is queued or running.
func (l *Log) Compacted() (size int64, pending bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.compacted, l.compacting
}

// Records writes everything queued before the call and reads the log
// back: every record queued before the call, or, if the log failed,
// those written before it failed. It waits on the disk.
func (l *Log) Records() ([]Record, error) {
	reply := make(chan readResult, 1)
	l.queue(logOp{kind: opRead, other: reply})
	r := <-reply
	return r.records, r.err
}

// Park writes and fsyncs everything queued before the call, closes the
// file and stops the writer, which frees what it held; the next piece of
// work starts it again. It reports whether the log holds every record
// queued before the call: nil, or why not (the log failed earlier). It
// waits on the disk.
func (l *Log) Park() error {
	l.mu.Lock()
	if !l.running && !l.closing && len(l.pending) == 0 {
		// Nothing to write: close the file here.
		defer l.mu.Unlock()
		return l.park()
	}
	l.mu.Unlock()
	reply := make(chan error, 1)
	l.queue(logOp{kind: opPark, other: reply})
	return <-reply
}

// Bytes is the log's size with what is queued.
func (l *Log) Bytes() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.size
}

// Close stops taking work, waits until the writer has written everything
// queued, fsyncs and closes the file. It is idempotent.
func (l *Log) Close() error {
	l.mu.Lock()
	if !l.closing {
		l.closing = true
		if !l.running {
			l.running = true
			go l.run()
		}
		l.wake.Signal()
	}
	l.mu.Unlock()
	<-l.done
	return l.result
}

// run is the writer goroutine. It ends after a park that left nothing to
// do, and after Close once the queue is empty.
func (l *Log) run() {
	for {
		l.mu.Lock()
		for len(l.pending) == 0 && !l.closing {
			l.wake.Wait()
		}
		ops, closing := l.pending, l.closing
		l.pending = nil
		l.mu.Unlock()
		if closing && len(ops) == 0 {
			l.result = l.finish()
			close(l.done)
			return
		}
		if l.write(ops) {
			l.mu.Lock()
			if len(l.pending) == 0 && !l.closing {
				l.running = false
				l.mu.Unlock()
				return
			}
			l.mu.Unlock()
		}
	}
}

// write does one batch of queued work, in order: the records are written
// together, a compaction, a read or a park first writes what came before
// it, and only the last index entry of the batch is saved. It reports
// whether the batch ended with the writer parked.
func (l *Log) write(ops []logOp) (parked bool) {
	var index any
	fsync := false
	for i := range ops {
		switch op := &ops[i]; op.kind {
		case opAppend:
			op.rec.encode(&l.buf)
			fsync = fsync || op.rec.Terminal
			parked = false
		case opIndex:
			index = op.other
		case opRewrite:
			l.flush(false)
			if err := l.replace(op.other.([]Record)); err != nil {
				l.log.Error().Err(err).Msg("rewrite event log")
			}
			parked = false
		case opCompact:
			l.flush(false)
			l.compact(op.other.(Keep))
			parked = false
		case opRead:
			l.flush(false)
			records, err := l.read()
			op.other.(chan readResult) <- readResult{records: records, err: err}
		case opPark:
			l.flush(true)
			fsync = false
			op.other.(chan error) <- l.park()
			parked = true
		}
	}
	l.flush(fsync)
	if index != nil {
		if err := saveIndex(filepath.Dir(l.path), index); err != nil {
			l.log.Error().Err(err).Msg("save session index entry")
		}
	}
	return parked && l.f == nil
}

// park closes the file and lets go of the write buffer; the file is
// opened again for the next write. It returns the log's error, if it
// failed.
func (l *Log) park() error {
	if l.f != nil {
		if err := l.f.Close(); err != nil && l.err == nil {
			l.err = err
			l.log.Error().Err(err).Msg("event log close failed; events are kept in memory only")
		}
		l.f = nil
	}
	l.buf = bytes.Buffer{}
	return l.err
}

// file is the open log file, opened again after a park; nil once the log
// failed.
func (l *Log) file() *os.File {
	if l.f == nil && l.err == nil {
		f, err := os.OpenFile(l.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			l.err = err
			l.log.Error().Err(err).Msg("event log open failed; events are kept in memory only")
			return nil
		}
		l.f = f
	}
	return l.f
}

// flush writes the buffered records, and fsyncs if fsync is set. A write
// error is logged once and the log stops (the session keeps working in
// memory).
func (l *Log) flush(fsync bool) {
	defer l.buf.Reset()
	if l.buf.Len() == 0 && !l.dirty {
		return
	}
	f := l.file()
	if f == nil {
		return
	}
	var err error
	if l.buf.Len() > 0 {
		_, err = f.Write(l.buf.Bytes())
		l.dirty = true
	}
	if err == nil && fsync && l.dirty {
		err = l.syncFile(f)
		l.dirty = false
	}
	if err != nil {
		l.err = err
		l.log.Error().Err(err).Msg("event log write failed; events are kept in memory only")
	}
}

// read reads the log as written: up to a torn or corrupt line, which it
// leaves in place (the writer appends after it only if the log failed).
func (l *Log) read() ([]Record, error) {
	f, err := os.Open(l.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	records, good, problem, err := readRecords(f)
	if problem != "" {
		l.log.Warn().Int64("offset", good).Msg(problem + " (read back)")
	}
	return records, err
}

// compact replaces the log by what keep keeps of it. A log that does not
// read back whole is left as it is: keep would drop what follows the bad
// line.
func (l *Log) compact(keep Keep) {
	defer func() {
		l.mu.Lock()
		l.compacting = false
		l.mu.Unlock()
	}()
	if l.err != nil {
		return
	}
	f, err := os.Open(l.path)
	if err != nil {
		l.log.Error().Err(err).Msg("compact event log")
		return
	}
	records, good, problem, err := readRecords(f)
	f.Close()
	if err != nil || problem != "" {
		l.log.Error().AnErr("error", err).Str("problem", problem).Int64("offset", good).Msg("event log not compacted: it does not read back whole")
		return
	}
	kept := keep(records)
	var size int64
	for i := range kept {
		size += kept[i].size()
	}
	if err := l.replace(kept); err != nil {
		l.log.Error().Err(err).Msg("compact event log")
		return
	}
	l.mu.Lock()
	l.size -= good - size
	l.compacted = size
	l.mu.Unlock()
}

// replace puts records in place of the log, atomically.
func (l *Log) replace(records []Record) error {
	var b bytes.Buffer
	for i := range records {
		records[i].encode(&b)
	}
	if err := l.replaceFile(l.path, b.Bytes()); err != nil {
		return err
	}
	if l.f != nil {
		l.f.Close()
	}
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		l.f, l.err = nil, err
		return err
	}
	l.f, l.dirty = f, false
	return nil
}

// finish fsyncs and closes the file.
func (l *Log) finish() error {
	if l.f == nil {
		return nil
	}
	err := l.syncFile(l.f)
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	l.f = nil
	return err
}
