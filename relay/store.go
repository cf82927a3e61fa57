package relay

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
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/internal/atomicfile"
	"github.com/majorhq/major/vault"
)

// Store keeps the session index and every session's event log on disk,
// under Dir:
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
// torn last line, which load drops; the lines before it are never
// rewritten in place. Compaction writes a new file and renames it over
// the old one.
type Store struct {
	dir string
	log zerolog.Logger
	// MaxLogBytes triggers compaction of a session's log at the end of a
	// turn: the raw CLI events of all but the last KeepCLITurns turns are
	// dropped (every client-facing event stays).
	MaxLogBytes  int64
	KeepCLITurns int
	// syncFile fsyncs a session's log (nil: (*os.File).Sync); tests hold
	// it to stand for a slow disk.
	syncFile func(*os.File) error
}

// Policy defaults, documented in the README.
const (
	DefaultMaxLogBytes  = 32 << 20
	DefaultKeepCLITurns = 20
)

// NewStore opens (creating) a state directory.
func NewStore(dir string, log zerolog.Logger) (*Store, error) {
	if err := os.MkdirAll(filepath.Join(dir, "sessions"), 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	return &Store{dir: dir, log: log, MaxLogBytes: DefaultMaxLogBytes, KeepCLITurns: DefaultKeepCLITurns}, nil
}

// meta is one session's index entry.
type meta struct {
	ID           string    `json:"id"`
	Person       string    `json:"person"`
	CLISessionID string    `json:"cli_session_id,omitempty"`
	Title        string    `json:"title,omitempty"`
	Created      time.Time `json:"created"`
	LastActivity time.Time `json:"last_activity"`
	// The settings a person chose for the session.
	Model             string `json:"model,omitempty"`
	PermissionMode    string `json:"permission_mode,omitempty"`
	MaxThinkingTokens int    `json:"max_thinking_tokens,omitempty"`
	Effort            string `json:"effort,omitempty"`
	// SpentUSD is what the session's turns have cost.
	SpentUSD float64 `json:"spent_usd,omitempty"`
	// Fork and ResumeAt are what the next CLI process starts with, until
	// one of its turns completes (see SessionParams).
	Fork       bool   `json:"fork,omitempty"`
	ResumeAt   string `json:"resume_at,omitempty"`
	ForkedFrom string `json:"forked_from,omitempty"`
	// LastEntry is the CLI's id of the conversation's last assistant
	// message (where a rewind to before the next message resumes).
	LastEntry string `json:"last_entry,omitempty"`
}

func (s *Store) sessionDir(id string) string { return filepath.Join(s.dir, "sessions", id) }

// saveMeta replaces the index entry atomically: write, fsync, rename.
func (s *Store) saveMeta(m meta) error {
	return saveMeta(s.sessionDir(m.ID), m)
}

func saveMeta(dir string, m meta) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(dir, "meta.json"), b)
}

// remove deletes a session's files.
func (s *Store) remove(id string) error {
	return os.RemoveAll(s.sessionDir(id))
}

// record is how an event is stored: its turn, whether it ends the turn,
// and the line clients get, embedded as is.
type record struct {
	Turn     int             `json:"t"`
	Terminal bool            `json:"x,omitempty"`
	Line     json.RawMessage `json:"e"`
}

func encodeRecord(ev *Event) []byte {
	var b bytes.Buffer
	b.Grow(len(ev.Line) + 32)
	b.WriteString(`{"t":`)
	b.WriteString(strconv.Itoa(ev.Turn))
	if ev.Terminal {
		b.WriteString(`,"x":true`)
	}
	b.WriteString(`,"e":`)
	b.Write(ev.Line)
	b.WriteString("}\n")
	return b.Bytes()
}

// eventFromLine rebuilds an Event from its stored line.
func eventFromLine(turn int, terminal bool, line []byte) (*Event, error) {
	var head struct {
		Seq  int64  `json:"seq"`
		Type string `json:"type"`
	}
	if err := json.Unmarshal(line, &head); err != nil || head.Seq <= 0 || head.Type == "" {
		return nil, fmt.Errorf("bad event line")
	}
	prefix := `{"seq":` + strconv.FormatInt(head.Seq, 10) + `,`
	if !bytes.HasPrefix(line, []byte(prefix)) {
		return nil, fmt.Errorf("event line does not start with its seq")
	}
	body := append([]byte{'{'}, line[len(prefix):]...)
	return newEvent(head.Seq, turn, head.Type, body, terminal), nil
}

// eventLog is one session's log writer: the goroutine that owns the log
// file and the index entry. Publishing only queues (see enqueue), so the
// CLI reader never waits on the disk while it holds the session's lock;
// the writer takes everything queued at once, writes it with one write
// call, fsyncs when a turn ended in it, and replaces the index entry.
//
// The queue is not bounded by a count: it holds pointers to events the
// stream keeps in memory anyway, for replay. When the disk is slower than
// the CLI the queue grows and the writer catches up in bigger batches; the
// CLI is never slowed down by the disk.
type eventLog struct {
	path     string
	log      zerolog.Logger
	syncFile func(*os.File) error

	mu      sync.Mutex
	wake    *sync.Cond
	pending []logOp
	size    int64 // the log's size once pending is written
	closing bool
	done    chan struct{}
	result  error // of the final flush, for close

	// Owned by the writer goroutine.
	f     *os.File
	err   error // the log failed: later events are kept in memory only
	dirty bool  // written since the last fsync
	buf   bytes.Buffer
}

// logOp is one queued piece of disk work: an event to append, an index
// entry to save, or a compacted log to put in place of the current one.
type logOp struct {
	ev      *Event
	meta    *meta
	rewrite []*Event
}

// openLog starts the writer of session id's log. Should the file not
// open, the error is returned with a writer that still saves the index
// entry (the events are kept in memory only).
func (s *Store) openLog(id string) (*eventLog, error) {
	l := &eventLog{
		path:     filepath.Join(s.sessionDir(id), "events.ndjson"),
		log:      s.log.With().Str("session", id).Logger(),
		syncFile: s.syncFile,
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

func (l *eventLog) open() error {
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

// append queues one event; the writer fsyncs after a turn's last one.
// It never waits on the disk. After close it does nothing.
func (l *eventLog) append(ev *Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closing {
		return
	}
	l.size += recordLen(ev)
	l.pending = append(l.pending, logOp{ev: ev})
	l.wake.Signal()
}

// saveMeta queues a replacement of the index entry.
func (l *eventLog) saveMeta(m meta) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closing {
		return
	}
	l.pending = append(l.pending, logOp{meta: &m})
	l.wake.Signal()
}

// rewrite queues the replacement of the log by events (compaction). The
// caller holds the stream's lock, so no event published after the
// snapshot events is queued before it.
func (l *eventLog) rewrite(events []*Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closing {
		return
	}
	events = append([]*Event(nil), events...)
	l.size = 0
	for _, ev := range events {
		l.size += recordLen(ev)
	}
	l.pending = append(l.pending, logOp{rewrite: events})
	l.wake.Signal()
}

// bytes is the log's size with what is queued.
func (l *eventLog) bytes() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.size
}

// close stops taking work, waits until the writer has written everything
// queued, fsyncs and closes the file. It is idempotent.
func (l *eventLog) close() error {
	l.mu.Lock()
	l.closing = true
	l.wake.Signal()
	l.mu.Unlock()
	<-l.done
	return l.result
}

// run is the writer goroutine; close stops it once the queue is empty.
func (l *eventLog) run() {
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

// write does one batch of queued work, in order: the events are written
// together, a compaction first writes what came before it, and only the
// last index entry of the batch is saved.
func (l *eventLog) write(ops []logOp) {
	var m *meta
	fsync := false
	for _, op := range ops {
		switch {
		case op.ev != nil:
			l.buf.Write(encodeRecord(op.ev))
			fsync = fsync || op.ev.Terminal
		case op.meta != nil:
			m = op.meta
		default:
			l.flush(false)
			if err := l.replace(op.rewrite); err != nil {
				l.log.Error().Err(err).Msg("compact event log")
			}
		}
	}
	l.flush(fsync)
	if m != nil {
		if err := saveMeta(filepath.Dir(l.path), *m); err != nil {
			l.log.Error().Err(err).Msg("save session index entry")
		}
	}
}

// flush writes the buffered events, and fsyncs if fsync is set. A write
// error is logged once and the log stops (the session keeps working in
// memory).
func (l *eventLog) flush(fsync bool) {
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

// replace puts events in place of the log, atomically.
func (l *eventLog) replace(events []*Event) error {
	var b bytes.Buffer
	for _, ev := range events {
		b.Write(encodeRecord(ev))
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
func (l *eventLog) finish() error {
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

// recordLen is len(encodeRecord(ev)), without encoding it.
func recordLen(ev *Event) int64 {
	n := len(`{"t":`) + len(strconv.Itoa(ev.Turn)) + len(`,"e":`) + len(ev.Line) + len("}\n")
	if ev.Terminal {
		n += len(`,"x":true`)
	}
	return int64(n)
}

// loaded is one session read back from disk.
type loaded struct {
	meta   meta
	events []*Event
}

// load reads every session. A torn last line (a crash mid-write) is
// dropped and the file truncated to the last whole line.
func (s *Store) load() ([]loaded, error) {
	entries, err := os.ReadDir(filepath.Join(s.dir, "sessions"))
	if err != nil {
		return nil, err
	}
	var out []loaded
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dir := s.sessionDir(e.Name())
		b, err := os.ReadFile(filepath.Join(dir, "meta.json"))
		if err != nil {
			s.log.Warn().Err(err).Str("dir", dir).Msg("session without a readable index entry; skipped")
			continue
		}
		var m meta
		if err := json.Unmarshal(b, &m); err != nil || m.ID != e.Name() || !vault.ValidPerson(m.Person) {
			s.log.Warn().Str("dir", dir).Msg("session with a bad index entry; skipped")
			continue
		}
		events, err := s.readLog(filepath.Join(dir, "events.ndjson"))
		if err != nil {
			s.log.Warn().Err(err).Str("session", m.ID).Msg("event log unreadable; the session starts with an empty log")
		}
		out = append(out, loaded{meta: m, events: events})
	}
	return out, nil
}

func (s *Store) readLog(path string) ([]*Event, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0o600)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	var events []*Event
	var good int64
	var lastSeq int64
	for {
		line, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			if len(line) > 0 {
				s.log.Warn().Str("path", path).Int("bytes", len(line)).Msg("dropping a torn last event line")
				if terr := f.Truncate(good); terr != nil {
					return events, terr
				}
			}
			return events, nil
		}
		if err != nil {
			return events, err
		}
		var rec record
		if json.Unmarshal(line, &rec) != nil {
			// Only the end of the file can be torn; a bad line in the
			// middle is corruption: keep what came before, and say so.
			s.log.Error().Str("path", path).Int64("offset", good).Msg("corrupt event line; the log is cut here")
			if terr := f.Truncate(good); terr != nil {
				return events, terr
			}
			return events, nil
		}
		ev, err := eventFromLine(rec.Turn, rec.Terminal, rec.Line)
		if err != nil || ev.Seq <= lastSeq {
			s.log.Error().Str("path", path).Int64("offset", good).Msg("event out of order; the log is cut here")
			if terr := f.Truncate(good); terr != nil {
				return events, terr
			}
			return events, nil
		}
		lastSeq = ev.Seq
		events = append(events, ev)
		good += int64(len(line))
	}
}

// expire removes sessions whose last activity is older than ttl.
func (s *Store) expire(sessions []loaded, ttl time.Duration, now time.Time) []loaded {
	if ttl <= 0 {
		return sessions
	}
	kept := sessions[:0]
	for _, l := range sessions {
		if now.Sub(l.meta.LastActivity) > ttl {
			s.log.Info().Str("session", l.meta.ID).Time("last_activity", l.meta.LastActivity).Msg("expiring an old session")
			if err := s.remove(l.meta.ID); err != nil {
				s.log.Warn().Err(err).Msg("remove expired session")
			}
			continue
		}
		kept = append(kept, l)
	}
	return kept
}

// compactEvents keeps every client-facing event and the raw CLI events of
// the last keepTurns turns.
func compactEvents(events []*Event, keepTurns int) []*Event {
	if len(events) == 0 {
		return events
	}
	lastTurn := events[len(events)-1].Turn
	out := make([]*Event, 0, len(events))
	for _, ev := range events {
		if ev.Type == "cli" && ev.Turn <= lastTurn-keepTurns {
			continue
		}
		out = append(out, ev)
	}
	return out
}
