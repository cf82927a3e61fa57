package relay

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/majorhq/major/clientevent"
)

// Event is one line of a session's log. It is encoded once, when published;
// every subscriber writes the same bytes.
type Event struct {
	Seq  int64
	Type string
	// Turn is the number of the turn the event belongs to (0: none).
	Turn int
	// Terminal marks the last event of a turn (done or error).
	Terminal bool
	// Compat is the seed-format line (no seq), for the compat stream; nil
	// for types the compat clients do not know.
	Compat []byte
	// Line is the full line with seq, for the events stream.
	Line []byte
	// run, on a text event that stands for a finished turn's
	// consecutive deltas, says where each of them was: a client that saw
	// some of them gets the rest (see coalesce).
	run *textRun
}

// newEvent encodes body, a JSON object whose first key is "type". A text
// event keeps body as its compat line.
func newEvent(seq int64, turn int, typ string, body []byte, terminal bool) *Event {
	ev := &Event{Seq: seq, Type: typ, Turn: turn, Terminal: terminal}
	line := make([]byte, 0, len(`{"seq":,`)+20+len(body)-1)
	line = strconv.AppendInt(append(line, `{"seq":`...), seq, 10)
	ev.Line = append(append(line, ','), body[1:]...)
	ev.Compat = clientevent.Compat(typ, body)
	return ev
}

// ErrSlow cuts off a subscriber that fell behind by more than its buffer.
var ErrSlow = errors.New("client fell behind; re-attach with the last seq")

// ErrStreamClosed ends subscriptions of a stream that was closed.
var ErrStreamClosed = errors.New("session stream closed")

// Stream is one session's event log and its subscribers. Publishing never
// waits for a subscriber: one whose buffer is full is cut off.
//
// The log need not be in memory: while its session is idle the events are
// on disk only (the stream is cold), and reading them (Subscribe, Events)
// loads them again first, without the lock that publishing takes; events
// published meanwhile are kept. Finished turns are tidied (their text
// deltas coalesced, see coalesce) without that lock too.
type Stream struct {
	mu   sync.Mutex
	seq  int64
	turn int
	// events are the events in memory, in seq order. The elements of a
	// slice of them are never changed: a tidy or a load puts a new slice
	// in place, so a copy of the slice header can be read without mu.
	events []*Event
	// base is the seq before events[0]; events before it were compacted
	// away and cannot be replayed.
	base   int64
	subs   []*Subscription
	closed bool
	open   bool // a turn has started and not ended
	onNew  func(*Event)
	onDrop func() // a subscriber was cut off for falling behind
	// redact takes the server's paths out of an event's body before it is
	// numbered, kept and sent (nil: nothing to take out).
	redact *clientevent.Redactor

	// cold: the events before events[0] (all of them, when it is empty)
	// are on disk only; load reads the disk's events back (nil: the
	// stream is never cold).
	cold bool
	load func() []*Event
	// upkeep makes one load, tidy or eviction at a time. It is taken
	// before mu (and before the session's lock), and no publisher takes
	// it.
	upkeep sync.Mutex
	// uses counts the publishes, subscriptions and reads; swept is its
	// value at the last sweep (see unused).
	uses, swept uint64
	// tidied is the seq up to which finished turns were tidied. The cli
	// events of turns up to trimTurn go at the next tidy (a compaction
	// dropped them from disk); those up to trimmed went already.
	tidied            int64
	trimTurn, trimmed int
	// limits bound what the CLI's output keeps (bounds.go): tally is
	// what the last turn holds, cliBytes the bytes of the cli events
	// not trimmed, in memory or on disk only, and cliTurns the same per
	// turn.
	limits   outputLimits
	tally    turnTally
	cliBytes int64
	cliTurns map[int]int64
}

// NewStream returns an empty stream; onNew (may be nil) sees every event as
// it is appended, under the stream's lock, for persistence.
func NewStream(onNew func(*Event)) *Stream {
	// Made is a use: the first sweep leaves a new stream alone (a fork's
	// copied events are queued for its log just after it is made).
	return &Stream{onNew: onNew, uses: 1, limits: defaultLimits}
}

// restore loads persisted events; only before the stream is used.
func (s *Stream) restore(events []*Event) {
	s.events = events
	if n := len(events); n > 0 {
		s.seq = events[n-1].Seq
		s.turn = events[n-1].Turn
		// A turn is open until its terminal event, whatever came after
		// it (a status between turns).
		s.open = s.turn > 0
		for i := n - 1; i >= 0 && events[i].Turn == s.turn; i-- {
			if events[i].Terminal {
				s.open = false
				break
			}
		}
		s.base = events[0].firstSeq() - 1
	}
	s.tallyLocked(events)
}

// TurnOpen reports whether the last turn has not ended yet.
func (s *Stream) TurnOpen() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open
}

// Seq is the sequence number of the last event.
func (s *Stream) Seq() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seq
}

// publish appends one event of type typ whose JSON body (starting with
// {"type":...) is body; beginTurn starts a new turn first.
func (s *Stream) publish(typ string, body []byte, beginTurn, terminal bool) *Event {
	ev, _ := s.publishAs(typ, body, beginTurn, terminal, false)
	return ev
}

// publishAs is publish; output marks an event made of the CLI's output,
// kept only within the bounds (boundLocked): full says one was not kept
// for the turn's bound.
func (s *Stream) publishAs(typ string, body []byte, beginTurn, terminal, output bool) (ev *Event, full bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, false
	}
	if output {
		if body, full = s.boundLocked(typ, body); body == nil || full {
			return nil, full
		}
	}
	if beginTurn {
		s.turn++
		s.open = true
		s.tally = turnTally{}
	}
	if terminal {
		s.open = false
	}
	s.seq++
	s.uses++
	ev = newEvent(s.seq, s.turn, typ, body, terminal)
	s.events = append(s.events, ev)
	s.countLocked(ev)
	if s.onNew != nil {
		s.onNew(ev)
	}
	var slow []*Subscription
	for _, sub := range s.subs {
		if sub.filter != nil && !sub.filter(ev) {
			continue
		}
		select {
		case sub.ch <- ev:
		default:
			slow = append(slow, sub)
		}
	}
	for _, sub := range slow {
		s.dropLocked(sub, ErrSlow)
		if s.onDrop != nil {
			s.onDrop()
		}
	}
	return ev, false
}

// publishJSON marshals v (a struct whose first field is Type) and publishes it.
func (s *Stream) publishJSON(v clientevent.Body, beginTurn, terminal bool) *Event {
	ev, _ := s.encodeAs(v, beginTurn, terminal, false)
	return ev
}

// publishOutput publishes v, an event made of the CLI's output, within
// the bounds on what that keeps (bounds.go); full says v would have taken
// the turn past its bound, and was not kept.
func (s *Stream) publishOutput(v clientevent.Body) (ev *Event, full bool) {
	return s.encodeAs(v, false, false, true)
}

// encodeAs encodes v, redacts it and publishes it (publishAs).
func (s *Stream) encodeAs(v clientevent.Body, beginTurn, terminal, output bool) (*Event, bool) {
	e := encoders.Get().(*encoder)
	defer e.release()
	var body []byte
	if c, ok := v.(clientevent.CLI); ok && len(c.Event) > 0 {
		e.buf.Reset()
		e.buf.Write(clientevent.AppendCLI(e.buf.AvailableBuffer(), c))
		body = e.buf.Bytes()
	} else {
		var err error
		if body, err = e.encode(v); err != nil {
			body, _ = clientevent.Marshal(clientevent.Error{Type: "error", Message: "encode event: " + err.Error()})
		}
	}
	// One redaction, here, of every event a client may see: the CLI's
	// messages, the events made of them and the relay's own.
	body = s.redact.JSON(body)
	// newEvent copies body into the line, but a text event keeps it as
	// its compat line: the encoder's buffer is used again.
	if v.EventType() == "text" {
		body = bytes.Clone(body)
	}
	return s.publishAs(v.EventType(), body, beginTurn, terminal, output)
}

// encoder is a JSON encoder with its buffer, kept for the next event.
type encoder struct {
	buf bytes.Buffer
	enc *json.Encoder
}

var encoders = sync.Pool{New: func() any {
	e := &encoder{}
	e.enc = json.NewEncoder(&e.buf)
	e.enc.SetEscapeHTML(false)
	return e
}}

// maxPooledBuffer bounds the buffer an encoder keeps for the next event:
// one that held a huge event goes, rather than stay in the pool.
const maxPooledBuffer = 1 << 20

// release puts e back in the pool, unless its buffer grew past
// maxPooledBuffer.
func (e *encoder) release() {
	if e.buf.Cap() <= maxPooledBuffer {
		encoders.Put(e)
	}
}

// encode marshals v without escaping <, > and &, so text reads as the
// model wrote it; the bytes are valid until the next encode.
func (e *encoder) encode(v any) ([]byte, error) {
	e.buf.Reset()
	if err := e.enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(e.buf.Bytes(), "\n"), nil
}

// Subscription is one client's view of a stream: Replay holds the events
// after the requested seq that were already there, C the live ones.
type Subscription struct {
	Replay []*Event
	C      <-chan *Event

	ch     chan *Event
	filter func(*Event) bool
	stream *Stream
	err    error
}

// Err says why C was closed: ErrSlow, or nil after Close.
func (sub *Subscription) Err() error {
	sub.stream.mu.Lock()
	defer sub.stream.mu.Unlock()
	return sub.err
}

// Close ends the subscription; it is idempotent.
func (sub *Subscription) Close() {
	sub.stream.mu.Lock()
	defer sub.stream.mu.Unlock()
	sub.stream.uses++
	sub.stream.dropLocked(sub, nil)
}

func (s *Stream) dropLocked(sub *Subscription, err error) {
	i := slices.Index(s.subs, sub)
	if i < 0 {
		return
	}
	s.subs = slices.Delete(s.subs, i, i+1)
	sub.err = err
	close(sub.ch)
}

// ErrGone is returned for a replay that starts before what the log still
// holds.
var ErrGone = errors.New("events before this seq are no longer kept")

// Subscribe returns the events after seq that pass filter (nil: all) and a
// channel of the live ones, buffered to buf events. A cold stream is
// loaded first (which waits on the disk).
func (s *Stream) Subscribe(after int64, filter func(*Event) bool, buf int) (*Subscription, error) {
	if buf <= 0 {
		buf = 1024
	}
	s.lockLoaded()
	defer s.mu.Unlock()
	s.uses++
	if after < s.base {
		return nil, ErrGone
	}
	ch := make(chan *Event, buf)
	sub := &Subscription{C: ch, ch: ch, filter: filter, stream: s}
	for _, ev := range s.afterLocked(after) {
		if filter == nil || filter(ev) {
			sub.Replay = append(sub.Replay, ev)
		}
	}
	if s.closed {
		sub.err = ErrStreamClosed
		close(ch)
		return sub, nil
	}
	s.subs = append(s.subs, sub)
	return sub, nil
}

// Events returns a copy of the log from seq after on, as Subscribe
// replays it; a cold stream is loaded first.
func (s *Stream) Events(after int64) []*Event {
	s.lockLoaded()
	defer s.mu.Unlock()
	s.uses++
	return s.afterLocked(after)
}

// afterLocked is what a client that saw the events up to seq after gets:
// a copy of the events after it, where a coalesced text event whose run
// after is inside (it comes after the run's cli events) is cut to the
// text the client has not seen. s.mu is held.
func (s *Stream) afterLocked(after int64) []*Event {
	rest := s.events[s.indexAfter(after):]
	out := make([]*Event, 0, len(rest))
	for i, ev := range rest {
		if ev.Type == "cli" {
			continue
		}
		// The first event after the cli events: the run, if any.
		out = append(out, rest[:i]...)
		if cut := ev.from(after); cut != nil {
			out = append(out, cut)
		}
		return append(out, rest[i+1:]...)
	}
	return append(out, rest...)
}

// indexAfter is the index of the first event in memory with a seq above
// after (compaction and coalescing leave gaps, so it searches).
func (s *Stream) indexAfter(after int64) int {
	return sort.Search(len(s.events), func(i int) bool { return s.events[i].Seq > after })
}

// loadedAfter is a copy of the events after seq after, as Events returns
// them, if they are in memory; false if the stream is cold. It never
// loads, so the session's lock may be held.
func (s *Stream) loadedAfter(after int64) ([]*Event, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cold {
		return nil, false
	}
	return s.afterLocked(after), true
}

// lockLoaded locks s.mu with the whole log in memory, loading it first if
// the stream is cold (without mu: publishing goes on meanwhile).
func (s *Stream) lockLoaded() {
	for {
		s.mu.Lock()
		if !s.cold {
			return
		}
		s.mu.Unlock()
		s.loadCold()
	}
}

// loadCold reads back the events that are on disk only and puts them
// before the ones published since. The loader's events are all that were
// published before it read (the log writer writes what is queued first),
// so the events in memory after its last one are exactly the ones it
// missed. Its finished turns are tidied on the way in. A log that cannot
// be read leaves the stream with what is in memory (the loader logs why).
func (s *Stream) loadCold() {
	s.upkeep.Lock()
	defer s.upkeep.Unlock()
	s.mu.Lock()
	cold, trim := s.cold, s.trimTurn
	s.mu.Unlock()
	if !cold {
		return
	}
	disk := s.load()
	end := lastTerminal(disk, 0) + 1
	events := coalesce(disk[:end], trim, s.redact)
	events = append(events, disk[end:]...)
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(disk); n > 0 {
		events = append(events, s.events[s.indexAfter(disk[n-1].Seq):]...)
	} else {
		events = append(events, s.events...)
	}
	s.events, s.cold = events, false
	s.tallyLocked(events)
	s.uses++
	if end > 0 {
		s.tidied = max(s.tidied, disk[end-1].Seq)
	}
	s.trimmed = trim
}

// evict lets the events go from memory if the log holds all of them up to
// seq upTo (the caller made sure of that), nothing was published since,
// no turn is open and no one is subscribed; it reports whether it did.
// s.upkeep is held, so no load or tidy runs.
func (s *Stream) evict(upTo int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.load == nil || s.open || len(s.subs) > 0 || s.seq != upTo || s.closed {
		return false
	}
	s.events, s.cold = nil, true
	return true
}

// unused reports whether nothing was published, subscribed or read since
// the last call, and no one is subscribed.
func (s *Stream) unused() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	unused := s.uses == s.swept && len(s.subs) == 0
	s.swept = s.uses
	return unused
}

// touch counts a use of the events that needs none of them now (a
// history built from them).
func (s *Stream) touch() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.uses++
}

// isCold reports whether the events are on disk only.
func (s *Stream) isCold() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cold
}

// lastTurn is the number of the last turn started.
func (s *Stream) lastTurn() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.turn
}

// trimUpTo has the next tidy drop the cli events of turns up to turn
// from memory (a compaction drops them from disk). It returns the turn up
// to which they go, this one or an earlier call's.
func (s *Stream) trimUpTo(turn int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.trimTurn = max(s.trimTurn, turn)
	return s.trimTurn
}

// tidy coalesces the text deltas of the turns that finished since the
// last tidy (see coalesce) and drops the cli events trimUpTo asked to go.
// The work is done on a copy of the slice header, without mu; under it,
// only the events published meanwhile are added to the new slice, which
// takes the old one's place. Publishing goes on meanwhile.
func (s *Stream) tidy() {
	s.upkeep.Lock()
	defer s.upkeep.Unlock()
	s.mu.Lock()
	events, trim, trimmed := s.events, s.trimTurn, s.trimmed
	from := s.indexAfter(s.tidied)
	s.mu.Unlock()
	if trim > trimmed {
		from = 0 // earlier turns lose their cli events too
	}
	end := lastTerminal(events, from) + 1
	if end <= from && trim <= trimmed {
		return
	}
	end = max(end, from)
	next := make([]*Event, 0, len(events)+64)
	next = append(next, coalesce(events[:from], trim, s.redact)...)
	next = append(next, coalesce(events[from:end], trim, s.redact)...)
	next = append(next, events[end:]...)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(next, s.events[len(events):]...)
	if end > 0 {
		s.tidied = max(s.tidied, events[end-1].Seq)
	}
	s.trimmedLocked(trim)
	s.trimmed = trim
}

// lastTerminal is the index of the last turn end in events at from or
// after; from-1 if there is none.
func lastTerminal(events []*Event, from int) int {
	for i := len(events) - 1; i >= from; i-- {
		if events[i].Terminal {
			return i
		}
	}
	return from - 1
}

// Subscribers is the number of live subscriptions.
func (s *Stream) Subscribers() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.subs)
}

// Close ends every subscription; later publishes are dropped.
func (s *Stream) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, sub := range slices.Clone(s.subs) {
		s.dropLocked(sub, ErrStreamClosed)
	}
}

// coalesce returns events (of finished turns) with each run of one turn's
// text events that only cli events separate made into one text event: its
// text is theirs, joined; its seq the last one's, in that one's place
// (after the cli events of the run). Clients that replay get the same
// text in fewer events, and a client that saw part of a run gets the rest
// of it (Event.from): every seq a client holds stays valid. A run whose
// joined text redact would change (a log written before the server hid
// its paths, with a path split across deltas) stays as it is: its
// events were redacted one by one. The cli events of turns up to trim are
// left out. events is not changed.
func coalesce(events []*Event, trim int, redact *clientevent.Redactor) []*Event {
	out := make([]*Event, 0, len(events))
	for i := 0; i < len(events); i++ {
		ev := events[i]
		if ev.Type == "cli" && ev.Turn <= trim {
			continue
		}
		if ev.Type != "text" {
			out = append(out, ev)
			continue
		}
		last := i
		for j := i + 1; j < len(events); j++ {
			if e := events[j]; e.Type == "text" && e.Turn == ev.Turn {
				last = j
			} else if e.Type != "cli" {
				break
			}
		}
		var texts []*Event
		for _, e := range events[i : last+1] {
			if e.Type == "text" {
				texts = append(texts, e)
			}
		}
		joined := joinTexts(texts, redact)
		for _, e := range events[i : last+1] {
			if e.Type == "cli" && e.Turn <= trim || e.Type == "text" && joined != nil {
				continue
			}
			out = append(out, e)
		}
		if joined != nil {
			out = append(out, joined)
		}
		i = last
	}
	return out
}

// textRun is where the deltas of a coalesced text event were: per delta,
// the gap from the previous delta's seq (the first's is from first, 0)
// and the length of its text, as uvarints: a few bytes a delta.
type textRun struct {
	first  int64
	pieces []byte
}

// each calls fn with each delta's seq and the offset in the joined text
// where it ends.
func (r *textRun) each(fn func(seq int64, end int) bool) {
	seq, end := r.first, 0
	for b := r.pieces; len(b) > 0; {
		gap, n := binary.Uvarint(b)
		size, m := binary.Uvarint(b[n:])
		if n <= 0 || m <= 0 {
			return
		}
		b = b[n+m:]
		seq += int64(gap)
		end += int(size)
		if !fn(seq, end) {
			return
		}
	}
}

// firstSeq is the seq of the first event ev stands for.
func (ev *Event) firstSeq() int64 {
	if ev.run != nil {
		return ev.run.first
	}
	return ev.Seq
}

// delta is a text event's text.
func (ev *Event) delta() string {
	var t clientevent.Text
	_ = json.Unmarshal(ev.Line, &t)
	return t.Delta
}

// joinTexts makes one text event of texts, consecutive text events of one
// turn (some may be coalesced already: their deltas carry over); nil if
// there is only one, or if redact would change the joined text.
func joinTexts(texts []*Event, redact *clientevent.Redactor) *Event {
	if len(texts) < 2 {
		return nil
	}
	run := &textRun{first: texts[0].firstSeq()}
	prev := run.first
	var joined strings.Builder
	for _, e := range texts {
		text := e.delta()
		if e.run == nil {
			run.pieces = binary.AppendUvarint(run.pieces, uint64(e.Seq-prev))
			run.pieces = binary.AppendUvarint(run.pieces, uint64(len(text)))
			prev = e.Seq
		} else {
			start := 0
			e.run.each(func(seq int64, end int) bool {
				run.pieces = binary.AppendUvarint(run.pieces, uint64(seq-prev))
				run.pieces = binary.AppendUvarint(run.pieces, uint64(end-start))
				prev, start = seq, end
				return true
			})
		}
		joined.WriteString(text)
	}
	if text := joined.String(); redact.Text(text) != text {
		return nil
	}
	last := texts[len(texts)-1]
	ev := textEvent(last.Seq, last.Turn, joined.String())
	ev.run = run
	return ev
}

// textEvent is the text event of text with seq and turn, as publishJSON
// makes it.
func textEvent(seq int64, turn int, text string) *Event {
	e := encoders.Get().(*encoder)
	defer e.release()
	body, err := e.encode(clientevent.Text{Type: "text", Delta: text})
	if err != nil {
		body = []byte(`{"type":"text","delta":""}`)
	}
	return newEvent(seq, turn, "text", bytes.Clone(body), false)
}

// from is what a client that saw the events up to seq after gets of ev:
// ev itself, or, for a coalesced text event some of whose deltas had seqs
// up to after, a text event with ev's seq and the rest of the text; nil
// when nothing is left.
func (ev *Event) from(after int64) *Event {
	if ev.run == nil || after < ev.run.first {
		return ev
	}
	seen := 0
	ev.run.each(func(seq int64, end int) bool {
		if seq > after {
			return false
		}
		seen = end
		return true
	})
	text := ev.delta()
	if seen >= len(text) {
		return nil
	}
	return textEvent(ev.Seq, ev.Turn, text[seen:])
}
