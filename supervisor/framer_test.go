package supervisor

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestFramer(t *testing.T) {
	big := strings.Repeat("x", 3<<20)
	cases := []struct {
		name  string
		input string
		max   int
		want  []string
		errs  int // lines skipped as too long
	}{
		{"simple", "a\nb\n", 0, []string{"a", "b"}, 0},
		{"no final newline", "a\nb", 0, []string{"a", "b"}, 0},
		{"blank lines and crlf", "\n\na\r\n\r\n  \nb\n", 0, []string{"a", "b"}, 0},
		{"line over the bufio size", big + "\nend\n", 0, []string{big, "end"}, 0},
		{"too long skipped", "short\n" + strings.Repeat("y", 100) + "\nafter\n", 50, []string{"short", "after"}, 1},
		{"too long at eof", "ok\n" + strings.Repeat("y", 100), 50, []string{"ok"}, 1},
		{"empty", "", 0, nil, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// One byte at a time as well as whole, to cross every boundary.
			for _, r := range []io.Reader{strings.NewReader(tc.input), iotest.HalfReader(strings.NewReader(tc.input))} {
				f := NewFramer(r, tc.max)
				var got []string
				skipped := 0
				for {
					line, err := f.Next()
					if errors.Is(err, ErrLineTooLong) {
						skipped++
						continue
					}
					if errors.Is(err, io.EOF) {
						break
					}
					if err != nil {
						t.Fatal(err)
					}
					got = append(got, string(line))
				}
				if len(got) != len(tc.want) || skipped != tc.errs {
					t.Fatalf("got %d lines (%d skipped), want %d (%d)", len(got), skipped, len(tc.want), tc.errs)
				}
				for i := range got {
					if got[i] != tc.want[i] {
						t.Fatalf("line %d differs (len %d vs %d)", i, len(got[i]), len(tc.want[i]))
					}
				}
			}
		})
	}
}

func TestFramerLinesAreOwned(t *testing.T) {
	f := NewFramer(strings.NewReader("first\nsecond\n"), 0)
	a, _ := f.Next()
	b, _ := f.Next()
	if string(a) != "first" || string(b) != "second" {
		t.Fatalf("a=%q b=%q: an earlier line was overwritten", a, b)
	}
}

func TestDecodeMessageGolden(t *testing.T) {
	// Every line the CLI wrote in the recorded session decodes, keeps its
	// bytes, and the typed fields the relay relies on are filled in.
	data := readTranscript(t)
	var results, inits, deltas, tools int
	for _, line := range data {
		if line.Dir != "from_cli" {
			continue
		}
		m, err := DecodeMessage(line.Msg)
		if err != nil {
			t.Fatalf("decode %s: %v", line.Msg[:min(80, len(line.Msg))], err)
		}
		if !bytes.Equal(m.Raw, line.Msg) {
			t.Fatal("Raw is not the line unchanged")
		}
		switch {
		case m.Type == "result":
			results++
			if m.SessionID == "" {
				t.Fatal("result without session id")
			}
		case m.Type == "system" && m.Subtype == "init":
			inits++
		case m.Type == "stream_event" && m.Event.Delta != nil && m.Event.Delta.Type == "text_delta":
			deltas++
		case m.Type == "control_request" && m.Request.Subtype == "can_use_tool":
			tools++
			if m.Request.ToolName != "AskUserQuestion" || len(m.Request.Input) == 0 {
				t.Fatalf("can_use_tool decoded as %+v", m.Request)
			}
		case m.Type == "control_request" && m.Request.Subtype == "hook_callback":
			if m.Request.CallbackID != "hook_webfetch" || len(m.Request.HookInput) == 0 {
				t.Fatalf("hook_callback decoded as %+v", m.Request)
			}
		}
	}
	if results != 4 || inits != 4 || deltas == 0 || tools != 1 {
		t.Fatalf("results=%d inits=%d deltas=%d can_use_tool=%d", results, inits, deltas, tools)
	}
}

func TestDecodeMessageKeepsWhatFits(t *testing.T) {
	cases := []struct {
		line      string
		typ       string
		isError   bool
		sessionID string
	}{
		{`{"type":"result","subtype":5,"is_error":true,"session_id":"s1"}`, "result", true, "s1"},
		{`{"type":"result","errors":[{"x":1}],"is_error":true,"session_id":"s2"}`, "result", true, "s2"},
		{`{"type":"assistant","message":{"content":42},"session_id":"s3"}`, "assistant", false, "s3"},
	}
	for _, tc := range cases {
		m, err := DecodeMessage([]byte(tc.line))
		if err != nil {
			t.Fatalf("%s: %v", tc.line, err)
		}
		if m.Type != tc.typ || m.IsError != tc.isError || m.SessionID != tc.sessionID || string(m.Raw) != tc.line {
			t.Fatalf("%s decoded as %+v", tc.line, m)
		}
	}
	for _, bad := range []string{`[1,2]`, `{"type":7}`, `"text"`, `{"no":"type"}`} {
		if _, err := DecodeMessage([]byte(bad)); err == nil {
			t.Fatalf("%s decoded", bad)
		}
	}
}
