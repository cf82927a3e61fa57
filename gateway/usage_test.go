package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
)

// stream is an answer as the API streams it, with usage in message_start
// and message_delta (a later API also repeats the input counts there).
func stream(eol string) string {
	lines := []string{
		"event: message_start",
		`data: {"type":"message_start","message":{"id":"msg_1","model":"claude-sonnet-4-5","usage":{"input_tokens":120,"cache_creation_input_tokens":3000,"cache_creation":{"ephemeral_1h_input_tokens":1000,"ephemeral_5m_input_tokens":2000},"cache_read_input_tokens":40000,"output_tokens":1,"inference_geo":"us"}}}`,
		"",
		"event: ping",
		`data: {"type": "ping"}`,
		"",
		"event: content_block_start",
		`data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
		"",
		"event: content_block_delta",
		`data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"` + strings.Repeat("x", 5000) + `"}}`,
		"",
		"event: message_delta",
		`data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":0,"cache_read_input_tokens":null,"output_tokens":77,"server_tool_use":{"web_search_requests":2}}}`,
		"",
		"event: message_stop",
		`data: {"type":"message_stop"}`,
		"",
	}
	return strings.Join(lines, eol) + eol
}

var streamUsage = Usage{InputTokens: 120, OutputTokens: 77, CacheCreationInputTokens: 3000, CacheCreation1hInputTokens: 1000,
	CacheReadInputTokens: 40000, WebSearchRequests: 2, InferenceGeo: "us"}

// feed meters s as a streamed answer read in the given chunk sizes.
func feed(s string, sse bool, sizes func() int) *meter {
	m := &meter{status: 200, sse: sse}
	b := &meteredBody{ReadCloser: io.NopCloser(strings.NewReader(s)), m: m}
	for {
		buf := make([]byte, max(sizes(), 1))
		if _, err := b.Read(buf); err != nil {
			return m
		}
	}
}

// However the stream is cut into reads, the meter reads the same usage.
func TestMeterChunking(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		name  string
		eol   string
		sizes func() int
	}{
		{"whole", "\n", func() int { return 1 << 20 }},
		{"bytes", "\n", func() int { return 1 }},
		{"random", "\n", func() int { return rng.IntN(300) }},
		{"crlf", "\r\n", func() int { return rng.IntN(50) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := feed(stream(tc.eol), true, tc.sizes)
			if m.usage != streamUsage || !m.complete() {
				t.Fatalf("usage %+v complete %v", m.usage, m.complete())
			}
		})
	}
}

// A stream cut before its end: what it had seen, and not complete; an
// error event: not complete.
func TestMeterIncomplete(t *testing.T) {
	full := stream("\n")
	cut := full[:strings.Index(full, "event: message_delta")]
	m := feed(cut, true, func() int { return 1000 })
	if want := (Usage{InputTokens: 120, OutputTokens: 1, CacheCreationInputTokens: 3000, CacheCreation1hInputTokens: 1000, CacheReadInputTokens: 40000, InferenceGeo: "us"}); m.usage != want || m.complete() {
		t.Fatalf("cut: usage %+v complete %v", m.usage, m.complete())
	}
	failed := cut + "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"
	if m := feed(failed, true, func() int { return 7 }); m.complete() {
		t.Fatal("a stream that ended in an error event is complete")
	}
}

// The meter's memory stays bounded however long a line is, and an
// overlong event it must read is dropped rather than misread.
func TestMeterBounded(t *testing.T) {
	huge := strings.Repeat("y", 4*maxEventData)
	s := stream("\n")
	s = strings.Replace(s, strings.Repeat("x", 5000), huge, 1)
	// An event without a name whose data is too long to keep.
	s += "data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":999},\"pad\":\"" + huge + "\"}\n\n"
	m := feed(s, true, func() int { return 32 << 10 })
	if m.usage != streamUsage {
		t.Fatalf("usage %+v", m.usage)
	}
	if cap(m.line) > 2*maxEventData || cap(m.data) > 2*maxEventData {
		t.Fatalf("line buffer %d, data buffer %d bytes", cap(m.line), cap(m.data))
	}
}

// A whole JSON answer: its usage and model wherever they are in it, the
// last of a name given twice, however long the answer, in bounded memory.
func TestMeterJSON(t *testing.T) {
	long := strings.Repeat("z", 3*maxEventData)
	for _, tc := range []struct {
		name, body string
		want       Usage
		model      string
	}{
		{"usage last", `{"id":"msg_2","type":"message","model":"claude-haiku-4-5","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":5,"output_tokens":6,"cache_read_input_tokens":7,"cache_creation_input_tokens":8}}`,
			Usage{InputTokens: 5, OutputTokens: 6, CacheReadInputTokens: 7, CacheCreationInputTokens: 8}, "claude-haiku-4-5"},
		{"usage first", ` { "usage" : {"input_tokens":5} , "content":[{"type":"text","text":"a \"usage\": {\"input_tokens\":9} }"}], "model" : "claude-opus-4-1" } `,
			Usage{InputTokens: 5}, "claude-opus-4-1"},
		{"longer than a buffer", `{"content":[{"type":"text","text":"` + long + `"},{"type":"tool_result","content":{"usage":{"input_tokens":1}}}],"usage":{"input_tokens":5},"model":"claude-sonnet-4-5"}`,
			Usage{InputTokens: 5}, "claude-sonnet-4-5"},
		{"named twice", `{"model":"claude-haiku-4-5","model":"claude-opus-4-1","usage":{"input_tokens":1},"usage":{"input_tokens":2}}`,
			Usage{InputTokens: 2}, "claude-opus-4-1"},
		{"escaped name", `{"\u006dodel":"claude-opus-4-1","usage":{"input_tokens":3}}`, Usage{InputTokens: 3}, "claude-opus-4-1"},
		{"a usage too long to keep", `{"usage":{"input_tokens":5},"usage":{"input_tokens":6,"pad":"` + long + `"}}`, Usage{}, ""},
		{"an error", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, Usage{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, size := range []int{1, 10, 4096, 1 << 20} {
				m := feed(tc.body, false, func() int { return size })
				if m.usage != tc.want || m.model != tc.model || !m.complete() {
					t.Fatalf("read %d bytes at a time: usage %+v model %q complete %v", size, m.usage, m.model, m.complete())
				}
			}
		})
	}
}

// topMembers keeps what encoding/json reads of the same object, however
// it is cut into reads, and never more than its bound.
func FuzzTopMembers(f *testing.F) {
	f.Add(`{"usage":{"input_tokens":5},"model":"m"}`, 3)
	f.Add(`{"a":"\\","usage":[1,{"b":"}"}],"model":"x\"y","model":"z"}`, 1)
	f.Add(`{"content":[{"text":"\"usage\":{}"}],"usage":{"output_tokens":2}}`, 7)
	f.Add(`{"\u0075sage":{},"mod\u0065l":"q"}`, 2)
	f.Fuzz(func(t *testing.T, s string, size int) {
		size = max(size%64, 1)
		const bound = 64
		tm := newTopMembers(bound, "usage", "model")
		for p := []byte(s); len(p) > 0; {
			n := min(size, len(p))
			tm.write(p[:n])
			p = p[n:]
		}
		for _, v := range tm.values {
			if len(v) > bound {
				t.Fatalf("kept %d bytes", len(v))
			}
		}
		var ref map[string]json.RawMessage
		if json.Unmarshal([]byte(s), &ref) != nil || ref == nil {
			return // not an object: whatever was kept is decoded by the caller
		}
		for _, name := range []string{"usage", "model"} {
			var want []byte
			if raw, seen := ref[name]; seen {
				var compact bytes.Buffer
				if err := json.Compact(&compact, raw); err != nil {
					t.Fatal(err)
				}
				if want = compact.Bytes(); len(want) > bound {
					want = nil // too long to keep
				}
			}
			if got := tm.value(name); !bytes.Equal(got, want) {
				t.Fatalf("%s: kept %q, encoding/json read %q", name, got, want)
			}
		}
	})
}

// Any bytes at all: no panic, memory bounded.
func FuzzMeter(f *testing.F) {
	f.Add(stream("\n"), 3)
	f.Add(stream("\r\n"), 1)
	f.Add("data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":-4}}}\n\n", 5)
	f.Fuzz(func(t *testing.T, s string, size int) {
		size = max(size%512, 1)
		m := feed(s, true, func() int { return size })
		if cap(m.line) > 2*maxEventData || cap(m.data) > 2*maxEventData {
			t.Fatalf("buffers grew to %d and %d", cap(m.line), cap(m.data))
		}
	})
}
