package main

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is a local OTLP/HTTP trace receiver: it keeps every span
// exported to it.
type otlpReceiver struct {
	*httptest.Server
	mu    sync.Mutex
	spans []*tracepb.Span
}

func newOTLPReceiver(tb testing.TB) *otlpReceiver {
	tb.Helper()
	r := &otlpReceiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
			return
		}
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			gz, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = gz
		}
		b, _ := io.ReadAll(body)
		var export coltrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &export); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, rs := range export.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
		r.mu.Unlock()
		out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	tb.Cleanup(r.Close)
	return r
}

func (r *otlpReceiver) all() []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*tracepb.Span(nil), r.spans...)
}

// attr is a span's attribute as text.
func attr(s *tracepb.Span, key string) string {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value.String()
		}
	}
	return ""
}

// TestTurnTraces: with OTEL_EXPORTER_OTLP_ENDPOINT set, a turn that calls
// a tool is one trace at a local OTLP receiver: a root "turn" span and,
// under it, the queue wait, the CLI's start, the tool call and each model
// request (from the gateway); the message's text is in it only with
// --trace-content.
func TestTurnTraces(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		extra   []string
		content bool
	}{
		{"sizes only", nil, false},
		{"with content", []string{"--trace-content"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			recv := newOTLPReceiver(t)
			s := startTraced(t, recv.URL, tc.extra...)
			message := `[[tool Glob {"pattern":"*.md"}]] trace-marker`
			readAll(t, s.req(t, "POST", "/api/claude/chat", `{"message":"`+strings.ReplaceAll(message, `"`, `\"`)+`"}`))
			s.stop(t) // flushes the traces

			spans := recv.all()
			var root *tracepb.Span
			for _, sp := range spans {
				if sp.Name == "turn" {
					root = sp
				}
			}
			if root == nil {
				t.Fatalf("no turn span among %d spans", len(spans))
			}
			if len(root.ParentSpanId) != 0 || attr(root, "major.outcome") != `string_value:"success"` {
				t.Fatalf("root: parent %x, outcome %s", root.ParentSpanId, attr(root, "major.outcome"))
			}
			children := map[string]int{}
			for _, sp := range spans {
				if !bytes.Equal(sp.TraceId, root.TraceId) || sp == root {
					continue
				}
				if !bytes.Equal(sp.ParentSpanId, root.SpanId) {
					t.Errorf("span %q's parent is %s, not the turn", sp.Name, hex.EncodeToString(sp.ParentSpanId))
				}
				if sp.StartTimeUnixNano < root.StartTimeUnixNano || sp.EndTimeUnixNano > root.EndTimeUnixNano+1e9 {
					t.Errorf("span %q lies outside its turn", sp.Name)
				}
				children[sp.Name]++
			}
			for _, want := range []string{"queue wait", "claude start", "tool Glob"} {
				if children[want] != 1 {
					t.Errorf("%q spans under the turn: %d (all: %v)", want, children[want], children)
				}
			}
			if children["model request"] < 2 {
				t.Errorf("model requests under the turn: %d (the tool call and the answer after it)", children["model request"])
			}
			var text strings.Builder
			for _, sp := range spans {
				for _, kv := range sp.Attributes {
					text.WriteString(kv.Value.String())
				}
			}
			if got := strings.Contains(text.String(), "trace-marker"); got != tc.content {
				t.Fatalf("message text in the spans: %v, want %v", got, tc.content)
			}
		})
	}
}

// startTraced starts the server exporting its traces to endpoint.
func startTraced(tb testing.TB, endpoint string, extra ...string) *server {
	tb.Helper()
	s := start(tb, extra...)
	// start has launched with the test's environment; launch again with
	// the endpoint added, on the same vault and state.
	s.stop(tb)
	return launch(tb, s.env, s.li, s.state, s.args, append(append([]string{}, s.environ...), "OTEL_EXPORTER_OTLP_ENDPOINT="+endpoint))
}
