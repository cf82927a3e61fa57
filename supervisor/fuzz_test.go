package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/rs/zerolog"
)

// transcriptMessages are the messages of the recorded CLI session, both
// directions, as seeds.
func transcriptMessages(tb testing.TB) [][]byte {
	tb.Helper()
	var out [][]byte
	for _, l := range readTranscript(tb) {
		out = append(out, l.Msg)
	}
	return out
}

// referenceLines is the Framer's contract written the obvious way: split on
// '\n', drop trailing '\r's, skip blank lines; a line (before trimming)
// over max bytes (maxLast for a last line without a newline) is an error in
// its place.
func referenceLines(data []byte, max, maxLast int) (lines []string, tooLong []int) {
	parts := bytes.Split(data, []byte("\n"))
	for i, p := range parts {
		if i == len(parts)-1 && len(p) == 0 {
			break // the stream ended with a newline
		}
		limit := max
		if i == len(parts)-1 {
			limit = maxLast
		}
		if len(p) > limit {
			tooLong = append(tooLong, len(lines))
			continue
		}
		p = bytes.TrimRight(p, "\r")
		if len(bytes.TrimSpace(p)) == 0 {
			continue
		}
		lines = append(lines, string(p))
	}
	return lines, tooLong
}

// afterLine finds line in data followed by a line ending (or the end of
// data) and returns what follows it.
func afterLine(data, line []byte) ([]byte, bool) {
	for from := 0; from <= len(data); {
		at := bytes.Index(data[from:], line)
		if at < 0 {
			return nil, false
		}
		rest := data[from+at+len(line):]
		if end := bytes.TrimLeft(rest, "\r"); len(end) == 0 || end[0] == '\n' {
			return rest, true
		}
		from += at + 1
	}
	return nil, false
}

func sameResult(got []string, tooLong []int, want []string, wantTooLong []int) bool {
	return slices.Equal(got, want) && slices.Equal(tooLong, wantTooLong)
}

// chunkReader returns data in reads of the sizes in steps, cycling, so the
// fuzzer chooses where reads split lines.
type chunkReader struct {
	data  []byte
	steps []byte
	i     int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := len(p)
	if len(r.steps) > 0 {
		n = min(n, int(r.steps[r.i%len(r.steps)])+1)
		r.i++
	}
	n = copy(p, r.data[:min(n, len(r.data))])
	r.data = r.data[n:]
	return n, nil
}

func FuzzFramer(f *testing.F) {
	for _, m := range transcriptMessages(f)[:12] {
		f.Add(append(append([]byte{}, m...), '\n'), uint16(0), []byte{7})
	}
	seeds := []string{
		"", "\n", "\r\n", "a", "a\n", "a\r\n\r\n", "\n\n \n\t\n", "a\nb", "a\r\rb\r\n",
		"12345678\n123456789\n1234567890\n", "123456789", "1234567890", " \r \n x \r\n",
		"\x00\n\xff\xfe\n", strings.Repeat("y", 300) + "\nz\n",
	}
	for _, s := range seeds {
		f.Add([]byte(s), uint16(9), []byte{0, 3, 200})
		f.Add([]byte(s), uint16(0), []byte{})
	}
	f.Fuzz(func(t *testing.T, data []byte, maxSeed uint16, steps []byte) {
		// A small limit so the fuzzer reaches it; 0 means the default.
		max := int(maxSeed % 512)
		limit := max
		if limit == 0 {
			limit = DefaultMaxLine
		}
		wantLines, wantTooLong := referenceLines(data, limit, limit)
		readers := map[string]io.Reader{
			"whole":  bytes.NewReader(data),
			"chunks": &chunkReader{data: data, steps: steps},
		}
		if len(data) < 4096 {
			readers["bytes"] = iotest.OneByteReader(bytes.NewReader(data))
		}
		for name, r := range readers {
			fr := NewFramer(r, max)
			var got []string
			var tooLong []int
			for calls := 0; ; calls++ {
				if calls > len(data)+2 {
					t.Fatalf("%s: Next does not reach EOF", name)
				}
				line, err := fr.Next()
				if errors.Is(err, ErrLineTooLong) {
					tooLong = append(tooLong, len(got))
					continue
				}
				if errors.Is(err, io.EOF) {
					if line != nil {
						t.Fatalf("%s: EOF with a line", name)
					}
					break
				}
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if bytes.IndexByte(line, '\n') >= 0 {
					t.Fatalf("%s: line contains a newline: %q", name, line)
				}
				if len(line) > limit {
					t.Fatalf("%s: line of %d bytes over the limit %d", name, len(line), limit)
				}
				got = append(got, string(line))
			}
			if !sameResult(got, tooLong, wantLines, wantTooLong) {
				t.Fatalf("%s: lines differ:\n got %q (too long at %v)\nwant %q (too long at %v)",
					name, got, tooLong, wantLines, wantTooLong)
			}
			// Concatenation: the lines appear in the input in order, each
			// followed by its line ending or the end of the input.
			rest := data
			for i, line := range got {
				next, ok := afterLine(rest, []byte(line))
				if !ok {
					t.Fatalf("%s: line %d is not a line of the rest of the input", name, i)
				}
				rest = next
			}
		}
	})
}

// typedKeys are the top-level keys Message decodes into typed fields; a
// value of another JSON type there fails the decode. encoding/json matches
// keys without regard to case.
var typedKeys = []string{
	"type", "subtype", "session_id", "request_id", "request", "response", "event",
	"message", "parent_tool_use_id", "is_error", "result", "terminal_reason", "errors",
}

// topLevel returns the members of a JSON object in order, or ok false if
// data is not one valid JSON object.
func topLevel(data []byte) (keys []string, vals []json.RawMessage, ok bool) {
	if !json.Valid(data) {
		return nil, nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return nil, nil, false
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, false
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, false
		}
		keys, vals = append(keys, tok.(string)), append(vals, v)
	}
	return keys, vals, true
}

// lastFold is the value encoding/json puts in a field named name: the last
// member whose key matches without regard to case.
func lastFold(keys []string, vals []json.RawMessage, name string) (json.RawMessage, bool) {
	for i := len(keys) - 1; i >= 0; i-- {
		if strings.EqualFold(keys[i], name) {
			return vals[i], true
		}
	}
	return nil, false
}

func FuzzDecodeMessage(f *testing.F) {
	for _, m := range transcriptMessages(f) {
		f.Add(m)
	}
	for _, s := range []string{
		``, `{}`, `null`, `[]`, `"type"`, `{"type":""}`, `{"type":5}`, `{"type":"x"}`,
		`{"type":"x","unknown":{"deep":[1,2,{"a":null}]}}`, `{"TYPE":"upper"}`,
		`{"type":"a","Type":"b"}`, `{"type":"result","subtype":7}`,
		`{"type":"assistant","message":{"role":"assistant","content":"plain"}}`,
		`{"type":"assistant","message":{"content":null}}`, `{"type":"assistant","message":{"content":5}}`,
		`{"type":"control_request","request_id":"r","request":{"subtype":"hook_callback","input":{"a":1}}}`,
		`{"type":"control_request","request":null}`, `{"type":"x"} trailing`, "{\"type\":\"\xff\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		orig := append([]byte(nil), line...)
		m, err := DecodeMessage(line)
		if !bytes.Equal(line, orig) {
			t.Fatal("DecodeMessage changed its input")
		}
		keys, vals, isObject := topLevel(line)
		typ := ""
		typeIsString := false
		if raw, ok := lastFold(keys, vals, "type"); ok {
			typeIsString = json.Unmarshal(raw, &typ) == nil && len(raw) > 0 && raw[0] == '"'
		}
		if err != nil {
			if m != nil {
				t.Fatal("error with a message")
			}
			// Unknown members never matter: an object with a non-empty
			// string type and no other typed member always decodes.
			if isObject && typeIsString && typ != "" {
				onlyType := true
				for _, k := range keys {
					for _, tk := range typedKeys[1:] {
						if strings.EqualFold(k, tk) {
							onlyType = false
						}
					}
				}
				if onlyType {
					t.Fatalf("object with type %q and only unknown members failed: %v", typ, err)
				}
			}
			return
		}
		if !isObject {
			t.Fatalf("decoded something that is not one JSON object: %q", line)
		}
		if m.Type == "" || m.Type != typ {
			t.Fatalf("Type %q, want %q", m.Type, typ)
		}
		if !bytes.Equal(m.Raw, line) {
			t.Fatal("Raw differs from the line")
		}
		if m.Request != nil && m.Request.Subtype == "hook_callback" && m.Request.Input != nil {
			t.Fatal("hook_callback input left in Input")
		}
		// Whatever decoded re-encodes: the relay forwards Raw and may
		// marshal the typed parts.
		if _, err := json.Marshal(m); err != nil {
			t.Fatalf("decoded message does not re-encode: %v", err)
		}
	})
}

func FuzzControlRequest(f *testing.F) {
	for _, m := range transcriptMessages(f) {
		var msg struct {
			Type    string          `json:"type"`
			Request json.RawMessage `json:"request"`
		}
		if json.Unmarshal(m, &msg) == nil && msg.Type == "control_request" {
			f.Add([]byte(msg.Request))
		}
	}
	for _, s := range []string{
		`{"subtype":"can_use_tool","tool_name":"Write","input":{"file_path":"a"},"tool_use_id":"t","permission_suggestions":[{"type":"addRules"}],"decision_reason":{"type":"rule"},"blocked_path":"/x","title":"T","description":"D"}`,
		`{"subtype":"can_use_tool","tool_name":"AskUserQuestion","input":{"questions":[{"question":"Q?","header":"H","options":[{"label":"A","description":"a"}],"multiSelect":true}]}}`,
		`{"subtype":"hook_callback","callback_id":"hook_webfetch","input":{"hook_event_name":"PreToolUse","tool_name":"WebFetch","tool_input":{"url":"https://x"}},"tool_use_id":"t"}`,
		`{"subtype":"hook_callback","callback_id":"h","input":null}`,
		`{"subtype":"hook_callback"}`, `{"subtype":"hook_callback","INPUT":{"a":1},"input":{"b":2}}`,
		`{"subtype":"mcp_message","server_name":"linkedin","message":{"jsonrpc":"2.0","id":1,"method":"tools/list"}}`,
		`{"subtype":"mcp_message","server_name":"linkedin","message":{"jsonrpc":"2.0","method":"notifications/initialized"}}`,
		`{"subtype":"interrupt"}`, `{"subtype":"initialize","hooks":{},"sdkMcpServers":[]}`,
		`{"subtype":"set_permission_mode","mode":"plan"}`, `{"subtype":""}`, `{}`, `null`, `{"subtype":5}`,
		`{"subtype":"can_use_tool","input":"not an object"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req ControlRequest
		if err := json.Unmarshal(body, &req); err != nil {
			return
		}
		keys, vals, isObject := topLevel(body)
		if isObject {
			input, hasInput := lastFold(keys, vals, "input")
			if string(input) == "null" {
				hasInput = false
			}
			if req.Subtype == "hook_callback" {
				if req.Input != nil {
					t.Fatal("hook_callback: input not moved to HookInput")
				}
				if hasInput && !bytes.Equal(req.HookInput, input) {
					t.Fatalf("hook_callback: HookInput %s, want %s", req.HookInput, input)
				}
			} else {
				if req.HookInput != nil {
					t.Fatalf("%s: HookInput set", req.Subtype)
				}
				if hasInput && !bytes.Equal(req.Input, input) {
					t.Fatalf("%s: Input %s, want %s", req.Subtype, req.Input, input)
				}
			}
		}

		// The same body inside a whole line decodes the same way.
		line := append(append([]byte(`{"type":"control_request","request_id":"fuzz","request":`), body...), '}')
		m, err := DecodeMessage(line)
		if err != nil {
			t.Fatalf("body decodes alone but not in a line: %v", err)
		}
		if string(body) != "null" && (m.Request == nil || !reflect.DeepEqual(*m.Request, req)) {
			t.Fatalf("in a line: %+v, alone: %+v", m.Request, req)
		}

		// Every decoded request gets exactly one answer that encodes, from
		// a handler or as an error for an unhandled subtype.
		var written []any
		r := newRouter(Handlers{
			CanUseTool: func(_ context.Context, q *ControlRequest) (PermissionResult, error) {
				return PermissionResult{Allow: true, UpdatedInput: q.Input}, nil
			},
			HookCallback: func(_ context.Context, q *ControlRequest) (json.RawMessage, error) {
				return nil, nil
			},
			MCPMessage: func(_ context.Context, _ string, msg json.RawMessage) (json.RawMessage, error) {
				if len(msg) == 0 {
					return nil, errors.New("no message")
				}
				return msg, nil
			},
		}, func(v any) error { written = append(written, v); return nil }, zerolog.Nop())
		resp, herr := r.handle(context.Background(), &req)
		answer := controlAnswer("fuzz", resp, herr)
		b, err := json.Marshal(answer)
		if err != nil {
			t.Fatalf("answer to %s does not encode: %v", req.Subtype, err)
		}
		var back struct {
			Type     string          `json:"type"`
			Response ControlResponse `json:"response"`
		}
		if err := json.Unmarshal(b, &back); err != nil || back.Type != "control_response" || back.Response.RequestID != "fuzz" {
			t.Fatalf("answer %s", b)
		}
		known := req.Subtype == "can_use_tool" || req.Subtype == "hook_callback" || req.Subtype == "mcp_message"
		if !known && back.Response.Subtype != "error" {
			t.Fatalf("unhandled subtype %q answered %s", req.Subtype, back.Response.Subtype)
		}
		r.close(ErrProcessExited)
		if len(written) != 0 {
			t.Fatal("handle wrote on its own")
		}
	})
}
