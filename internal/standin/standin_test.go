package standin_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/internal/standin"
	"github.com/majorhq/major/supervisor"
)

// pipeCLI runs the stand-in in-process on pipes.
type pipeCLI struct {
	in   *io.PipeWriter
	out  *bufio.Reader
	done chan error
}

func startPipe(tb testing.TB, opts standin.Options) *pipeCLI {
	tb.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	c := &pipeCLI{in: inW, out: bufio.NewReader(outR), done: make(chan error, 1)}
	go func() {
		err := standin.Run(opts, inR, outW)
		outW.CloseWithError(io.EOF)
		c.done <- err
	}()
	tb.Cleanup(func() {
		_ = inW.Close()
		_ = outR.Close()
		select {
		case <-c.done:
		case <-time.After(5 * time.Second):
			tb.Error("stand-in did not stop after stdin closed")
		}
	})
	return c
}

func (c *pipeCLI) send(tb testing.TB, v any) {
	tb.Helper()
	b, _ := json.Marshal(v)
	if _, err := c.in.Write(append(b, '\n')); err != nil {
		tb.Fatal(err)
	}
}

type outLine struct {
	Type      string `json:"type"`
	Subtype   string `json:"subtype"`
	SessionID string `json:"session_id"`
	IsError   bool   `json:"is_error"`
	Result    string `json:"result"`
	Terminal  string `json:"terminal_reason"`
	Response  *struct {
		Subtype   string          `json:"subtype"`
		RequestID string          `json:"request_id"`
		Response  json.RawMessage `json:"response"`
		Error     string          `json:"error"`
	} `json:"response"`
	Event *struct {
		Type  string `json:"type"`
		Delta *struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"delta"`
	} `json:"event"`
}

func (c *pipeCLI) next(tb testing.TB) outLine {
	tb.Helper()
	b, err := c.out.ReadBytes('\n')
	if err != nil {
		tb.Fatalf("read stand-in output: %v", err)
	}
	var l outLine
	if err := json.Unmarshal(b, &l); err != nil {
		tb.Fatalf("stand-in wrote a line that is not JSON: %q", b)
	}
	return l
}

// untilResult reads one turn's lines, returning their kinds and the result.
func (c *pipeCLI) untilResult(tb testing.TB) ([]string, outLine) {
	tb.Helper()
	var kinds []string
	for {
		l := c.next(tb)
		k := l.Type
		switch {
		case l.Subtype != "":
			k += "/" + l.Subtype
		case l.Event != nil:
			k += "/" + l.Event.Type
		}
		kinds = append(kinds, k)
		if l.Type == "result" {
			return kinds, l
		}
	}
}

func user(text string) map[string]any {
	return map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": text},
		"parent_tool_use_id": nil, "session_id": ""}
}

func control(id, subtype string) map[string]any {
	return map[string]any{"type": "control_request", "request_id": id, "request": map[string]any{"subtype": subtype}}
}

func TestInitializeAndTurn(t *testing.T) {
	c := startPipe(t, standin.Options{})
	c.send(t, control("req_init", "initialize"))
	l := c.next(t)
	if l.Type != "control_response" || l.Response == nil || l.Response.Subtype != "success" || l.Response.RequestID != "req_init" {
		t.Fatalf("initialize answer: %+v", l)
	}
	c.send(t, control("req_x", "rewind_files"))
	if l := c.next(t); l.Response == nil || l.Response.Subtype != "error" || l.Response.RequestID != "req_x" {
		t.Fatalf("unsupported request answer: %+v", l)
	}

	for turn := 0; turn < 2; turn++ {
		c.send(t, user("hello deltas:3 size:4"))
		kinds, res := c.untilResult(t)
		want := "system/init stream_event/message_start stream_event/content_block_start " +
			"stream_event/content_block_delta stream_event/content_block_delta stream_event/content_block_delta " +
			"assistant stream_event/content_block_stop stream_event/message_delta stream_event/message_stop result/success"
		if got := strings.Join(kinds, " "); got != want {
			t.Fatalf("turn %d lines:\n got %s\nwant %s", turn, got, want)
		}
		if res.IsError || res.Result != "abcdabcdabcd" || res.SessionID == "" || res.Terminal != "completed" {
			t.Fatalf("result %+v", res)
		}
	}
}

func TestInterruptEndsStreamingTurn(t *testing.T) {
	c := startPipe(t, standin.Options{Resume: "resumed-id"})
	c.send(t, user("deltas:100000 delay:1ms"))
	deltas := 0
	for deltas == 0 {
		if l := c.next(t); l.Event != nil && l.Event.Type == "content_block_delta" {
			deltas++
		} else if l.Type == "system" && l.SessionID != "resumed-id" {
			t.Fatalf("init session_id %q, want the resumed id", l.SessionID)
		}
	}
	c.send(t, control("req_int", "interrupt"))
	sawAnswer := false
	for {
		l := c.next(t)
		if l.Type == "control_response" {
			if l.Response.RequestID != "req_int" || l.Response.Subtype != "success" ||
				!strings.Contains(string(l.Response.Response), "still_queued") {
				t.Fatalf("interrupt answer %+v", l.Response)
			}
			sawAnswer = true
			continue
		}
		if l.Event != nil && l.Event.Type == "content_block_delta" {
			deltas++
			continue
		}
		if l.Type == "result" {
			if !sawAnswer {
				t.Fatal("result before the interrupt was answered")
			}
			if l.Subtype != "error_during_execution" || !l.IsError || l.Terminal != "aborted_streaming" || l.SessionID != "resumed-id" {
				t.Fatalf("interrupted result %+v", l)
			}
			break
		}
	}
	if deltas >= 100000 {
		t.Fatal("interrupt did not shorten the turn")
	}
	// The process stays usable, and an interrupt between turns is only answered.
	c.send(t, control("req_idle", "interrupt"))
	if l := c.next(t); l.Response == nil || l.Response.RequestID != "req_idle" {
		t.Fatalf("idle interrupt answer %+v", l)
	}
	c.send(t, user("deltas:1"))
	if _, res := c.untilResult(t); res.Subtype != "success" {
		t.Fatalf("turn after interrupt: %+v", res)
	}
}

func TestParse(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"-p", "--resume", "abc", "--verbose"}, "abc"},
		{[]string{"--resume=def"}, "def"},
		{[]string{"--resume"}, ""},
		{nil, ""},
	}
	for _, tc := range cases {
		if got := standin.ParseArgs(tc.args).Resume; got != tc.want {
			t.Errorf("ParseArgs(%q).Resume = %q, want %q", tc.args, got, tc.want)
		}
	}
	turns := []struct {
		text string
		want standin.TurnSpec
	}{
		{"hello", standin.TurnSpec{Deltas: 5, Size: 16}},
		{"deltas:50 size:3 delay:2ms stamp:1", standin.TurnSpec{Deltas: 50, Size: 3, Delay: 2 * time.Millisecond, Stamp: true}},
		{"deltas:-1 size:0 delay:x exit:1", standin.TurnSpec{Deltas: 5, Size: 16, Exit: true}},
	}
	for _, tc := range turns {
		if got := standin.ParseTurn(tc.text); got != tc.want {
			t.Errorf("ParseTurn(%q) = %+v, want %+v", tc.text, got, tc.want)
		}
	}
}

// sink records a session's events and signals turn ends.
type sink struct {
	ends chan supervisor.Event
	text strings.Builder
}

func (s *sink) Publish(ev supervisor.Event) {
	if ev.Kind == supervisor.EventCLI && ev.Msg.Event != nil && ev.Msg.Event.Delta != nil {
		s.text.WriteString(ev.Msg.Event.Delta.Text)
	}
	if ev.Kind == supervisor.EventTurnEnd {
		s.ends <- ev
	}
}

func (s *sink) wait(tb testing.TB) supervisor.Event {
	tb.Helper()
	select {
	case ev := <-s.ends:
		return ev
	case <-time.After(20 * time.Second):
		tb.Fatal("turn did not end")
		return supervisor.Event{}
	}
}

// TestDrivesSupervisorSession checks the stand-in is good enough for the
// supervisor: turns, interrupt, a crash and the resume after it.
func TestDrivesSupervisorSession(t *testing.T) {
	bin := standin.Build(t)
	rec := &sink{ends: make(chan supervisor.Event, 4)}
	s := supervisor.NewCLI(supervisor.CLIConfig{
		ID: "standin", Person: "sebastian", Dir: t.TempDir(),
		Spec:   supervisor.Spec{Binary: bin, Env: []string{"PATH=/usr/bin:/bin"}, Grace: 2 * time.Second},
		Sink:   rec,
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel),
	})
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	ctx := context.Background()

	if err := s.Send(ctx, "deltas:4 size:2"); err != nil {
		t.Fatal(err)
	}
	if ev := rec.wait(t); ev.Err != nil || ev.Msg == nil || ev.Msg.IsError || ev.Interrupted {
		t.Fatalf("first turn ended %+v", ev)
	}
	if rec.text.String() != "abababab" {
		t.Fatalf("streamed text %q", rec.text.String())
	}
	id, pid := s.CLISessionID(), s.Pid()
	if id == "" || pid == 0 {
		t.Fatalf("after a turn: cli session %q pid %d", id, pid)
	}

	if err := s.Send(ctx, "deltas:100000 delay:1ms"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if err := s.Interrupt(ctx); err != nil {
		t.Fatal(err)
	}
	if ev := rec.wait(t); !ev.Interrupted || ev.Msg == nil || ev.Msg.TerminalReason != "aborted_streaming" {
		t.Fatalf("interrupted turn ended %+v", ev)
	}
	if s.Pid() != pid {
		t.Fatal("interrupt replaced the process")
	}

	if err := s.Send(ctx, "exit:1"); err != nil {
		t.Fatal(err)
	}
	if ev := rec.wait(t); !errors.Is(ev.Err, supervisor.ErrProcessExited) {
		t.Fatalf("crashed turn ended with %v", ev.Err)
	}

	if err := s.Send(ctx, "deltas:1"); err != nil {
		t.Fatal(err)
	}
	if ev := rec.wait(t); ev.Err != nil || ev.Msg.SessionID != id {
		t.Fatalf("resumed turn: err %v, session %q, want %q", ev.Err, ev.Msg.SessionID, id)
	}
	if p := s.Pid(); p == pid || p == 0 {
		t.Fatalf("resume ran in pid %d (first %d)", p, pid)
	}
}
