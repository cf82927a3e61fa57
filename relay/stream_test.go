package relay

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/majorhq/major/clientevent"
)

func publishN(s *Stream, n int) {
	for i := 0; i < n; i++ {
		s.publishJSON(clientevent.Status{Type: "status", Message: fmt.Sprint(i)}, false, false)
	}
}

func TestStreamReplayAndLive(t *testing.T) {
	s := NewStream(nil)
	publishN(s, 5)
	sub, err := s.Subscribe(2, nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if len(sub.Replay) != 3 || sub.Replay[0].Seq != 3 || sub.Replay[2].Seq != 5 {
		t.Fatalf("replay after 2: %d events, first %d", len(sub.Replay), sub.Replay[0].Seq)
	}
	publishN(s, 2)
	for want := int64(6); want <= 7; want++ {
		ev := <-sub.C
		if ev.Seq != want {
			t.Fatalf("live seq %d, want %d", ev.Seq, want)
		}
	}
}

func TestStreamLineFormat(t *testing.T) {
	s := NewStream(nil)
	ev := s.publishJSON(clientevent.Text{Type: "text", Delta: "a <b> & c"}, true, false)
	if got, want := string(ev.Compat), `{"type":"text","delta":"a <b> & c"}`; got != want {
		t.Fatalf("compat line %s, want %s", got, want)
	}
	if got, want := string(ev.Line), `{"seq":1,"type":"text","delta":"a <b> & c"}`; got != want {
		t.Fatalf("line %s, want %s", got, want)
	}
	cli := s.publishJSON(clientevent.CLI{Type: "cli", Event: json.RawMessage(`{"type":"mystery","x":1}`)}, false, false)
	if cli.Compat != nil {
		t.Fatal("cli events must not reach the compat stream")
	}
	if got, want := string(cli.Line), `{"seq":2,"type":"cli","event":{"type":"mystery","x":1}}`; got != want {
		t.Fatalf("cli line %s, want %s", got, want)
	}
}

func TestStreamCutsOffSlowSubscriber(t *testing.T) {
	s := NewStream(nil)
	slow, _ := s.Subscribe(0, nil, 4)
	fast, _ := s.Subscribe(0, nil, 100)
	defer fast.Close()
	publishN(s, 10) // never blocks, although slow reads nothing
	n := 0
	for range slow.C {
		n++
	}
	if n != 4 || !errors.Is(slow.Err(), ErrSlow) {
		t.Fatalf("slow subscriber got %d events, err %v", n, slow.Err())
	}
	if len(fast.C) != 10 {
		t.Fatalf("fast subscriber has %d events, want 10", len(fast.C))
	}
	// The slow client re-attaches with its last seq and misses nothing.
	again, err := s.Subscribe(4, nil, 100)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if len(again.Replay) != 6 || again.Replay[0].Seq != 5 {
		t.Fatalf("re-attach replay: %d events", len(again.Replay))
	}
}

func TestStreamFilterAndClose(t *testing.T) {
	s := NewStream(nil)
	sub, _ := s.Subscribe(0, func(ev *Event) bool { return ev.Type == "done" }, 10)
	s.publishJSON(clientevent.Text{Type: "text", Delta: "x"}, true, false)
	s.publishJSON(clientevent.Done{Type: "done", SessionID: "s"}, false, true)
	ev := <-sub.C
	if ev.Type != "done" || !ev.Terminal || ev.Turn != 1 {
		t.Fatalf("filtered event %+v", ev)
	}
	s.Close()
	if _, ok := <-sub.C; ok {
		t.Fatal("channel open after Close")
	}
	sub.Close() // idempotent
	if s.publishJSON(clientevent.Text{Type: "text"}, false, false) != nil {
		t.Fatal("publish after close")
	}
}

func TestStreamGoneBeforeBase(t *testing.T) {
	s := NewStream(nil)
	s.restore([]*Event{newEvent(11, 1, "status", []byte(`{"type":"status","message":"x"}`), false)})
	if _, err := s.Subscribe(3, nil, 1); !errors.Is(err, ErrGone) {
		t.Fatalf("subscribe before base: %v", err)
	}
	sub, err := s.Subscribe(10, nil, 1)
	if err != nil || len(sub.Replay) != 1 {
		t.Fatalf("subscribe at base: %v %d", err, len(sub.Replay))
	}
}

func TestStreamRestoreTurnOpenOnlyWithoutItsTerminal(t *testing.T) {
	st := func(seq int64, turn int, typ string, terminal bool) *Event {
		return newEvent(seq, turn, typ, []byte(`{"type":"`+typ+`"}`), terminal)
	}
	cases := []struct {
		name   string
		events []*Event
		open   bool
	}{
		{"ended", []*Event{st(1, 1, "turn_start", false), st(2, 1, "done", true)}, false},
		{"a status after the end", []*Event{st(1, 1, "turn_start", false), st(2, 1, "done", true), st(3, 1, "status", false)}, false},
		{"cut off", []*Event{st(1, 1, "turn_start", false), st(2, 1, "text", false)}, true},
		{"cut off after an ended turn", []*Event{st(1, 1, "turn_start", false), st(2, 1, "done", true), st(3, 2, "turn_start", false)}, true},
		{"no turn yet", []*Event{st(1, 0, "status", false)}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := NewStream(nil)
			s.restore(tc.events)
			if got := s.TurnOpen(); got != tc.open {
				t.Fatalf("TurnOpen = %v, want %v", got, tc.open)
			}
		})
	}
}
