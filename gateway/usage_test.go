package gateway

import (
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

// A whole JSON answer: its usage at the end; one too long to keep goes
// unmetered.
func TestMeterJSON(t *testing.T) {
	body := `{"id":"msg_2","type":"message","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":5,"output_tokens":6,"cache_read_input_tokens":7,"cache_creation_input_tokens":8}}`
	m := feed(body, false, func() int { return 10 })
	if want := (Usage{InputTokens: 5, OutputTokens: 6, CacheReadInputTokens: 7, CacheCreationInputTokens: 8}); m.usage != want || !m.complete() {
		t.Fatalf("usage %+v complete %v", m.usage, m.complete())
	}
	long := `{"content":[{"type":"text","text":"` + strings.Repeat("z", maxJSONBody) + `"}],"usage":{"input_tokens":5}}`
	m = feed(long, false, func() int { return 1 << 20 })
	if !m.overflow || m.usage != (Usage{}) || m.body != nil {
		t.Fatalf("overflow %v usage %+v", m.overflow, m.usage)
	}
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
