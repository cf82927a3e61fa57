package relay

import (
	"encoding/json"
	"slices"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/clientevent"
	"github.com/majorhq/major/sessionstore"
	"github.com/majorhq/major/vault"
)

// A session reaches disk through package sessionstore: its index entry
// (meta) and its event log. What an index entry holds, which events a
// compaction keeps, when a session expires and when an idle session's
// events leave memory are decided here.

// Compaction policy, documented in the README: at the end of a turn, a
// session's log over DefaultMaxLogBytes (RegistryConfig.MaxLogBytes), and
// over twice its size after its last compaction, is compacted by its log
// writer, dropping the raw CLI events of all but the last
// DefaultKeepCLITurns turns (every client-facing event stays). The
// doubling bounds the work: a log of client events alone past the limit
// is not rewritten at every turn.
const (
	DefaultMaxLogBytes  = 32 << 20
	DefaultKeepCLITurns = 20
)

// DefaultEvictAfter is how long, at least, an idle session keeps its
// events in memory (RegistryConfig.EvictAfter).
const DefaultEvictAfter = time.Minute

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
	// Pinned: the person pinned the chat on top of their list.
	Pinned bool `json:"pinned,omitempty"`
}

// record is how the log keeps ev.
func record(ev *Event) sessionstore.Record {
	return sessionstore.Record{Seq: ev.Seq, Type: ev.Type, Turn: ev.Turn, Terminal: ev.Terminal, Line: ev.Line}
}

func records(events []*Event) []sessionstore.Record {
	out := make([]sessionstore.Record, len(events))
	for i, ev := range events {
		out[i] = record(ev)
	}
	return out
}

// eventOf rebuilds an Event from its record: the body is the line
// without its seq (the store checked that it starts with it). A log
// written before the server took its paths and upstream error text out
// of events is replayed as a client may see it now: redact cleans every
// body (a scan for '/' where there is nothing to clean).
func eventOf(r sessionstore.Record, redact *clientevent.Redactor) *Event {
	prefix := len(`{"seq":`) + len(strconv.FormatInt(r.Seq, 10)) + len(",")
	body := append([]byte{'{'}, r.Line[prefix:]...)
	if r.Type == "cli" {
		body = clientevent.RecordedCLI(body)
	}
	return newEvent(r.Seq, r.Turn, r.Type, redact.JSON(body), r.Terminal)
}

// loaded is one session read back from disk.
type loaded struct {
	meta   meta
	events []*Event
}

// loadSessions reads every session's index entry (the events are read one
// session at a time, by readEvents); one whose index entry is not a valid
// session's is skipped.
func loadSessions(st *sessionstore.Store, log zerolog.Logger) ([]loaded, error) {
	saved, err := st.Load()
	if err != nil {
		return nil, err
	}
	var out []loaded
	for _, sv := range saved {
		var m meta
		if err := json.Unmarshal(sv.Index, &m); err != nil || m.ID != sv.ID || m.Person != sv.Person || !vault.ValidPerson(m.Person) {
			log.Warn().Str("dir", st.SessionDir(sv.Person, sv.ID)).Msg("session with a bad index entry; skipped")
			continue
		}
		out = append(out, loaded{meta: m})
	}
	return out, nil
}

// readEvents reads session id's log at start, each event as redact shows
// it (a torn last line is dropped, see sessionstore.Store.ReadLog).
func readEvents(st *sessionstore.Store, log zerolog.Logger, person, id string, redact *clientevent.Redactor) []*Event {
	records, err := st.ReadLog(st.LogPath(person, id))
	if err != nil {
		log.Warn().Err(err).Str("session", id).Msg("event log unreadable; the session starts with an empty log")
	}
	events := make([]*Event, len(records))
	for i, r := range records {
		events[i] = eventOf(r, redact)
	}
	return events
}

// expire removes the stored sessions whose last activity is older than
// ttl and returns the others.
func expire(st *sessionstore.Store, log zerolog.Logger, sessions []loaded, ttl time.Duration, now time.Time) []loaded {
	if ttl <= 0 {
		return sessions
	}
	kept := sessions[:0]
	for _, l := range sessions {
		if now.Sub(l.meta.LastActivity) > ttl {
			log.Info().Str("session", l.meta.ID).Time("last_activity", l.meta.LastActivity).Msg("expiring an old session")
			if err := st.Remove(l.meta.Person, l.meta.ID); err != nil {
				log.Warn().Err(err).Msg("remove expired session")
			}
			continue
		}
		kept = append(kept, l)
	}
	return kept
}

// compactEvents keeps every client-facing event and the raw CLI events of
// the last keepTurns turns (a fork's copy keeps none).
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

// compactRecords is what a compaction of a log keeps: every record but the
// cli events of turns up to upTo.
func compactRecords(upTo int) sessionstore.Keep {
	return func(records []sessionstore.Record) []sessionstore.Record {
		kept := records[:0]
		for _, r := range records {
			if r.Type != "cli" || r.Turn > upTo {
				kept = append(kept, r)
			}
		}
		return kept
	}
}

// compactIfDueLocked queues the compaction of the session's log when the
// policy above says so, or when the session's cli events leave less than
// a turn's room (bounds.go: then only the last turn's are kept): the log
// writer does it from the file, and the next tidy drops the same events
// from memory. One asked for while another is under way is queued at the
// next call. c.mu is held; nothing waits on the disk or goes through the
// events here.
func (c *Session) compactIfDueLocked() {
	last := c.stream.lastTurn()
	if c.stream.cliOver() && last > 1 {
		c.stream.trimUpTo(last - 1)
	}
	if c.elog == nil {
		// Memory is all there is: the next tidy.
		return
	}
	size := c.elog.Bytes()
	compacted, pending := c.elog.Compacted()
	if pending {
		return
	}
	if size > c.maxLog && size > 2*compacted && last > DefaultKeepCLITurns {
		c.stream.trimUpTo(last - DefaultKeepCLITurns)
	}
	if upTo := c.stream.trimUpTo(0); upTo > c.compactedTo {
		c.compactedTo = upTo
		c.elog.Compact(compactRecords(upTo))
	}
}

// An idle session's events leave memory: its stream keeps its seq and
// turn but not its events, its compat history goes, its log writer stops
// and closes the file. What reads the events (an attach, a replay, either
// history, a fork or rewind) reads them back from the log first; a message
// needs none of them, and publishing goes on without them. A sweep every
// EvictAfter evicts the sessions nothing used since the sweep before, and
// tidies the others (coalesces their finished turns' text deltas).

// loadEvents is the stream's loader: every event the log holds, as the
// session's clients see them. The log writer writes what is queued before
// it reads. A log that cannot be read back gives none; the stream keeps
// what it has in memory.
func (c *Session) loadEvents() []*Event {
	records, err := c.elog.Records()
	if err != nil {
		c.log.Error().Err(err).Msg("event log not read back; replays hold only the events in memory")
		return nil
	}
	events := make([]*Event, len(records))
	for i, r := range records {
		events[i] = eventOf(r, c.redact)
	}
	return events
}

// idleLocked reports whether nothing of the session is under way: no
// message running, waiting or being started, no turn end waiting for its
// hook. c.mu is held.
func (c *Session) idleLocked() bool {
	q := &c.queue
	return q.current == nil && len(q.waiting) == 0 && len(q.sent) == 0 && q.toStart == nil && !c.held.waiting() && len(c.held.events) == 0 && q.holder == ""
}

// evict lets the session's events and compat history go from memory if
// the session is idle, no client is attached and its log holds every
// event; it reports whether they went. The log writer is parked first
// (written, fsynced, file closed): a log that failed keeps the events in
// memory.
func (c *Session) evict() bool {
	if c.elog == nil || c.stream.load == nil {
		return false
	}
	c.mu.Lock()
	idle := c.idleLocked()
	c.mu.Unlock()
	if !idle {
		return false
	}
	seq := c.stream.Seq()
	if err := c.elog.Park(); err != nil {
		return false
	}
	// Lock order: the stream's upkeep, then the session, then the stream.
	c.stream.upkeep.Lock()
	defer c.stream.upkeep.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.idleLocked() || !c.stream.evict(seq) {
		return false
	}
	c.hist = nil
	// The finished messages no resend can join any more go too (see
	// resendOf): nothing would ever read them.
	now := time.Now()
	c.queue.recent = slices.DeleteFunc(c.queue.recent, func(t *Ticket) bool {
		return !t.stream || t.delivered || now.Sub(t.ended) >= resendWindow
	})
	if len(c.queue.recent) == 0 {
		c.queue.recent = nil
	}
	c.queue.sent = nil // empty, but its array may hold a ticket before its start
	return true
}

// lockHistory locks c.mu with the compat history there, building it from
// the events first if it left memory with them (without c.mu: loading
// waits on the disk). It returns the history; c.mu stays locked.
func (c *Session) lockHistory() *chatHistory {
	c.stream.touch()
	for {
		c.mu.Lock()
		if c.hist != nil {
			return c.hist
		}
		c.mu.Unlock()
		events := c.stream.Events(0)
		h := &chatHistory{}
		for _, ev := range events {
			h.observe(ev, nil)
		}
		var last int64
		if n := len(events); n > 0 {
			last = events[n-1].Seq
		}
		c.mu.Lock()
		if c.hist != nil {
			return c.hist
		}
		// What was published since the copy (publishers hold c.mu) is in
		// memory, unless the events left it again meanwhile.
		if more, ok := c.stream.loadedAfter(last); ok {
			for _, ev := range more {
				h.observe(ev, nil)
			}
			c.hist = h
			return h
		}
		c.mu.Unlock()
	}
}

// startSweeps starts the sweeps, with a Store and EvictAfter > 0.
func (s *Registry) startSweeps() {
	if s.cfg.Store == nil || s.cfg.EvictAfter <= 0 {
		return
	}
	s.sweeps.Add(1)
	go func() {
		defer s.sweeps.Done()
		tick := time.NewTicker(s.cfg.EvictAfter)
		defer tick.Stop()
		for {
			select {
			case <-s.ctx.Done():
				return
			case <-tick.C:
				s.sweep()
			}
		}
	}()
}

// sweep evicts the sessions that nothing used since the last sweep and
// tidies the others.
func (s *Registry) sweep() {
	s.mu.Lock()
	chats := s.allLocked()
	s.mu.Unlock()
	for _, c := range chats {
		if s.ctx.Err() != nil {
			return
		}
		if c.stream.unused() && c.evict() {
			continue
		}
		c.stream.tidy()
	}
}
