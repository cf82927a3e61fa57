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
// with one write call; the file is fsynced at the end of every turn and on
// close. A crash can leave at most a torn last line, which Load drops; the
// lines before it are never rewritten in place. Compaction writes a new
// file and renames it over the old one.
type Store struct {
	dir string
	log zerolog.Logger
	// MaxLogBytes triggers compaction of a session's log at the end of a
	// turn: the raw CLI events of all but the last KeepCLITurns turns are
	// dropped (every client-facing event stays).
	MaxLogBytes  int64
	KeepCLITurns int
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
}

func (s *Store) sessionDir(id string) string { return filepath.Join(s.dir, "sessions", id) }

// saveMeta replaces the index entry atomically: write, fsync, rename.
func (s *Store) saveMeta(m meta) error {
	dir := s.sessionDir(m.ID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, "meta.json"), b)
}

func writeFileAtomic(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
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

// eventLog is one session's open log file.
type eventLog struct {
	mu    sync.Mutex
	f     *os.File
	size  int64
	err   error
	log   zerolog.Logger
	dirty bool
}

func (s *Store) openLog(id string) (*eventLog, error) {
	dir := s.sessionDir(id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, "events.ndjson"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &eventLog{f: f, size: st.Size(), log: s.log.With().Str("session", id).Logger()}, nil
}

// append writes one event; at a turn's end it also fsyncs. A write error
// is logged once and the log stops (the session keeps working in memory).
func (l *eventLog) append(ev *Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil || l.f == nil {
		return
	}
	rec := encodeRecord(ev)
	n, err := l.f.Write(rec)
	l.size += int64(n)
	l.dirty = true
	if err == nil && ev.Terminal {
		err = l.f.Sync()
		l.dirty = false
	}
	if err != nil {
		l.err = err
		l.log.Error().Err(err).Msg("event log write failed; events are kept in memory only")
	}
}

func (l *eventLog) bytes() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.size
}

func (l *eventLog) close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Sync()
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	l.f = nil
	return err
}

// rewrite replaces the log with events (compaction), atomically.
func (l *eventLog) rewrite(path string, events []*Event) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b bytes.Buffer
	for _, ev := range events {
		b.Write(encodeRecord(ev))
	}
	if err := writeFileAtomic(path, b.Bytes()); err != nil {
		return err
	}
	if l.f != nil {
		l.f.Close()
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		l.f, l.err = nil, err
		return err
	}
	l.f, l.size, l.dirty = f, int64(b.Len()), false
	return nil
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
		if err := json.Unmarshal(b, &m); err != nil || m.ID != e.Name() || !ValidPerson(m.Person) {
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
