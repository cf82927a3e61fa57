package relay

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/clientevent"
	"github.com/majorhq/major/sessionstore"
	"github.com/majorhq/major/vault"
)

// A session reaches disk through package sessionstore: its index entry
// (meta) and its event log. What an index entry holds, which events a
// compaction keeps and when a session expires are decided here.

// Compaction policy, documented in the README: a session's log over
// DefaultMaxLogBytes is compacted at the end of a turn, dropping the raw
// CLI events of all but the last DefaultKeepCLITurns turns (every
// client-facing event stays).
const (
	DefaultMaxLogBytes  = 32 << 20
	DefaultKeepCLITurns = 20
)

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

// loadSessions reads every session the store holds, each event as
// redactor(person) shows it; one whose index entry is not a valid
// session's is skipped.
func loadSessions(st *sessionstore.Store, log zerolog.Logger, redactor func(person string) *clientevent.Redactor) ([]loaded, error) {
	saved, err := st.Load()
	if err != nil {
		return nil, err
	}
	var out []loaded
	for _, sv := range saved {
		var m meta
		if err := json.Unmarshal(sv.Index, &m); err != nil || m.ID != sv.ID || !vault.ValidPerson(m.Person) {
			log.Warn().Str("dir", st.SessionDir(sv.ID)).Msg("session with a bad index entry; skipped")
			continue
		}
		l := loaded{meta: m, events: make([]*Event, len(sv.Records))}
		redact := redactor(m.Person)
		for i, r := range sv.Records {
			l.events[i] = eventOf(r, redact)
		}
		out = append(out, l)
	}
	return out, nil
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
			if err := st.Remove(l.meta.ID); err != nil {
				log.Warn().Err(err).Msg("remove expired session")
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
