// Package sessionstore is how a session reaches disk and comes back: the
// state directory's index entries and event logs, the writer goroutine
// that owns each log file, torn and corrupt lines at load, and the atomic
// replacement of a compacted log.
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
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/internal/atomicfile"
)

// Store keeps the session index and every session's event log on disk,
// under its directory:
//
//	sessions/<id>/meta.json     the index entry, replaced atomically
//	sessions/<id>/events.ndjson the event log, append-only
//
// Why append-only files rather than an embedded database: the log is
// written in order and read back whole, which is exactly what a file does,
// with no dependency and nothing to tune. Each event is one line written
// in order by the session's log writer, never by the goroutine that
// publishes it; the file is fsynced at the end of every turn and on close.
// A crash loses the events the writer had not written yet and can leave a
// torn last line, which Load drops; the lines before it are never
// rewritten in place. Compaction writes a new file and renames it over
// the old one.
type Store struct {
	dir string
	log zerolog.Logger
	// SyncFile fsyncs a session's log (nil: (*os.File).Sync); tests hold
	// it to stand for a slow disk.
	SyncFile func(*os.File) error
}

// New opens (creating) a state directory.
func New(dir string, log zerolog.Logger) (*Store, error) {
	if err := os.MkdirAll(filepath.Join(dir, "sessions"), 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	return &Store{dir: dir, log: log}, nil
}

// Dir is the state directory.
func (s *Store) Dir() string { return s.dir }

// SessionDir is where session id's files are.
func (s *Store) SessionDir(id string) string { return filepath.Join(s.dir, "sessions", id) }

// LogPath is session id's event log.
func (s *Store) LogPath(id string) string { return filepath.Join(s.SessionDir(id), "events.ndjson") }

// SaveIndex replaces session id's index entry (entry as JSON) atomically:
// write, fsync, rename.
func (s *Store) SaveIndex(id string, entry any) error {
	return saveIndex(s.SessionDir(id), entry)
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

// Remove deletes session id's files.
func (s *Store) Remove(id string) error {
	return os.RemoveAll(s.SessionDir(id))
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

// Saved is one session read back from disk: its index entry as saved, and
// its log.
type Saved struct {
	ID      string
	Index   json.RawMessage
	Records []Record
}

// Load reads every session. A session without a readable index entry is
// skipped; a torn last line (a crash mid-write) is dropped and the file
// truncated to the last whole line.
func (s *Store) Load() ([]Saved, error) {
	entries, err := os.ReadDir(filepath.Join(s.dir, "sessions"))
	if err != nil {
		return nil, err
	}
	var out []Saved
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dir := s.SessionDir(e.Name())
		index, err := os.ReadFile(filepath.Join(dir, "meta.json"))
		if err != nil {
			s.log.Warn().Err(err).Str("dir", dir).Msg("session without a readable index entry; skipped")
			continue
		}
		records, err := s.ReadLog(s.LogPath(e.Name()))
		if err != nil {
			s.log.Warn().Err(err).Str("session", e.Name()).Msg("event log unreadable; the session starts with an empty log")
		}
		out = append(out, Saved{ID: e.Name(), Index: index, Records: records})
	}
	return out, nil
}

// ReadLog reads the log at path. It ends at a torn last line or at a
// corrupt or out-of-order one, and truncates the file there, so the next
// append follows the last good line.
func (s *Store) ReadLog(path string) ([]Record, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0o600)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	var records []Record
	var good, lastSeq int64
	cut := func(msg string) ([]Record, error) {
		s.log.Error().Str("path", path).Int64("offset", good).Msg(msg)
		return records, f.Truncate(good)
	}
	for {
		line, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			if len(line) > 0 {
				s.log.Warn().Str("path", path).Int("bytes", len(line)).Msg("dropping a torn last event line")
				return records, f.Truncate(good)
			}
			return records, nil
		}
		if err != nil {
			return records, err
		}
		rec, err := decode(line)
		switch {
		case err != nil:
			// Only the end of the file can be torn; a bad line in the
			// middle is corruption: keep what came before, and say so.
			return cut("corrupt event line; the log is cut here")
		case rec.Seq <= lastSeq:
			return cut("event out of order; the log is cut here")
		}
		lastSeq = rec.Seq
		records = append(records, rec)
		good += int64(len(line))
	}
}

// Log is one session's log writer: the goroutine that owns the log file
// and the index entry. Append, SaveIndex and Rewrite only queue, so the
// CLI reader never waits on the disk while it holds the session's lock;
// the writer takes everything queued at once, writes it with one write
// call, fsyncs when a turn ended in it, and replaces the index entry.
//
// The queue is not bounded by a count: its records point at lines the
// session keeps in memory anyway, for replay. When the disk is slower
// than the CLI the queue grows and the writer catches up in bigger
// batches; the CLI is never slowed down by the disk.
type Log struct {
	path     string
	log      zerolog.Logger
	syncFile func(*os.File) error

	mu      sync.Mutex
	wake    *sync.Cond
	pending []logOp
	size    int64 // the log's size once pending is written
	closing bool
	done    chan struct{}
	result  error // of the final flush, for Close

	// Owned by the writer goroutine.
	f     *os.File
	err   error // the log failed: later events are kept in memory only
	dirty bool  // written since the last fsync
	buf   bytes.Buffer
}

// logOp is one queued piece of disk work: a record to append, an index
// entry to save, or a compacted log to put in place of the current one.
type logOp struct {
	kind opKind
	rec  Record // opAppend
	// other is the index entry (opIndex) or the records (opRewrite, a
	// []Record): one field keeps the queue's elements small.
	other any
}

type opKind uint8

const (
	opAppend opKind = iota
	opIndex
	opRewrite
)

// Open starts the writer of session id's log. Should the file not open,
// the error is returned with a writer that still saves the index entry
// (the events are kept in memory only).
func (s *Store) Open(id string) (*Log, error) {
	l := &Log{
		path:     s.LogPath(id),
		log:      s.log.With().Str("session", id).Logger(),
		syncFile: s.SyncFile,
		done:     make(chan struct{}),
	}
	if l.syncFile == nil {
		l.syncFile = (*os.File).Sync
	}
	l.wake = sync.NewCond(&l.mu)
	err := l.open()
	if err != nil {
		l.err = err
	}
	go l.run()
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

// queue adds op unless the log is closing.
func (l *Log) queue(op logOp) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closing {
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
	}
	l.pending = append(l.pending, op)
	l.wake.Signal()
}

// Append queues one record; the writer fsyncs after a turn's last one.
// It never waits on the disk. After Close it does nothing.
func (l *Log) Append(r Record) { l.queue(logOp{kind: opAppend, rec: r}) }

// SaveIndex queues a replacement of the index entry (entry as JSON,
// encoded by the writer: entry must not change after the call).
func (l *Log) SaveIndex(entry any) { l.queue(logOp{kind: opIndex, other: entry}) }

// Rewrite queues the replacement of the log by records (compaction). A
// caller that publishes events must hold its lock across the snapshot
// and this call, so no later event is queued before it.
func (l *Log) Rewrite(records []Record) { l.queue(logOp{kind: opRewrite, other: records}) }

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
	l.closing = true
	l.wake.Signal()
	l.mu.Unlock()
	<-l.done
	return l.result
}

// run is the writer goroutine; Close stops it once the queue is empty.
func (l *Log) run() {
	defer close(l.done)
	for {
		l.mu.Lock()
		for len(l.pending) == 0 && !l.closing {
			l.wake.Wait()
		}
		ops, closing := l.pending, l.closing
		l.pending = nil
		l.mu.Unlock()
		l.write(ops)
		if closing && len(ops) == 0 {
			l.result = l.finish()
			return
		}
	}
}

// write does one batch of queued work, in order: the records are written
// together, a compaction first writes what came before it, and only the
// last index entry of the batch is saved.
func (l *Log) write(ops []logOp) {
	var index any
	fsync := false
	for i := range ops {
		switch op := &ops[i]; op.kind {
		case opAppend:
			op.rec.encode(&l.buf)
			fsync = fsync || op.rec.Terminal
		case opIndex:
			index = op.other
		case opRewrite:
			l.flush(false)
			if err := l.replace(op.other.([]Record)); err != nil {
				l.log.Error().Err(err).Msg("compact event log")
			}
		}
	}
	l.flush(fsync)
	if index != nil {
		if err := saveIndex(filepath.Dir(l.path), index); err != nil {
			l.log.Error().Err(err).Msg("save session index entry")
		}
	}
}

// flush writes the buffered records, and fsyncs if fsync is set. A write
// error is logged once and the log stops (the session keeps working in
// memory).
func (l *Log) flush(fsync bool) {
	defer l.buf.Reset()
	if l.err != nil || l.f == nil {
		return
	}
	var err error
	if l.buf.Len() > 0 {
		_, err = l.f.Write(l.buf.Bytes())
		l.dirty = true
	}
	if err == nil && fsync && l.dirty {
		err = l.syncFile(l.f)
		l.dirty = false
	}
	if err != nil {
		l.err = err
		l.log.Error().Err(err).Msg("event log write failed; events are kept in memory only")
	}
}

// replace puts records in place of the log, atomically.
func (l *Log) replace(records []Record) error {
	var b bytes.Buffer
	for i := range records {
		records[i].encode(&b)
	}
	if err := atomicfile.Write(l.path, b.Bytes()); err != nil {
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
