package relay

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"sort"
	"strconv"
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
type Stream struct {
	mu     sync.Mutex
	seq    int64
	turn   int
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
}

// NewStream returns an empty stream; onNew (may be nil) sees every event as
// it is appended, under the stream's lock, for persistence.
func NewStream(onNew func(*Event)) *Stream {
	return &Stream{onNew: onNew}
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
		s.base = events[0].Seq - 1
	}
}

// compact replaces the retained events with keep(events); seqs and the
// base do not change, so replays skip what was dropped.
func (s *Stream) compact(keep func([]*Event) []*Event) []*Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = keep(s.events)
	return append([]*Event(nil), s.events...)
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
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	if beginTurn {
		s.turn++
		s.open = true
	}
	if terminal {
		s.open = false
	}
	s.seq++
	ev := newEvent(s.seq, s.turn, typ, body, terminal)
	s.events = append(s.events, ev)
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
	return ev
}

// publishJSON marshals v (a struct whose first field is Type) and publishes it.
func (s *Stream) publishJSON(v clientevent.Body, beginTurn, terminal bool) *Event {
	e := encoders.Get().(*encoder)
	defer encoders.Put(e)
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
	return s.publish(v.EventType(), body, beginTurn, terminal)
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
// channel of the live ones, buffered to buf events.
func (s *Stream) Subscribe(after int64, filter func(*Event) bool, buf int) (*Subscription, error) {
	if buf <= 0 {
		buf = 1024
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if after < s.base {
		return nil, ErrGone
	}
	ch := make(chan *Event, buf)
	sub := &Subscription{C: ch, ch: ch, filter: filter, stream: s}
	for _, ev := range s.events[s.indexAfter(after):] {
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

// Events returns a copy of the log from seq after on.
func (s *Stream) Events(after int64) []*Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Event(nil), s.events[s.indexAfter(after):]...)
}

// indexAfter is the index of the first retained event with a seq above
// after (compaction leaves gaps, so it searches).
func (s *Stream) indexAfter(after int64) int {
	return sort.Search(len(s.events), func(i int) bool { return s.events[i].Seq > after })
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
