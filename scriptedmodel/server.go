package scriptedmodel

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Reply is what the model answers to one request.
type Reply struct {
	// Blocks are the content blocks, in order.
	Blocks []ReplyBlock
	// ChunkSize splits each text block into deltas of at most this many
	// bytes (0: the whole text in one delta).
	ChunkSize int
	// Delay is slept before each delta, to make slow streams.
	Delay time.Duration
	// Status, when not zero, answers with this HTTP error status instead
	// (401, 429 and 529 carry the API's error bodies).
	Status int
	// RetryAfter is the retry-after header of a 429, in seconds (0: 1).
	RetryAfter int
	// Drop closes the connection after the first delta (or at once, for a
	// non-streaming request) without finishing the message.
	Drop bool
	// Malformed sends an SSE data line that is not JSON in mid-stream.
	Malformed bool
	// Hang starts the message and then sends nothing more until the
	// client goes away: a model that stalls.
	Hang bool
	// InputTokens is the usage the message reports for its input
	// (0: 10), so a test can make a turn as expensive as it likes.
	InputTokens int
	// Usage, when set, is the whole usage the message reports, as the
	// API spells it (cache tokens, server_tool_use, ...): message_start
	// carries all of it but output_tokens and server_tool_use, which come
	// in message_delta (output_tokens 10 unless given), as the API sends
	// them.
	Usage map[string]any
}

// ReplyBlock is a text block or, when Name is set, a tool_use block.
type ReplyBlock struct {
	Text  string
	Name  string
	Input any
}

// Text returns a reply of one text block.
func Text(s string) Reply { return Reply{Blocks: []ReplyBlock{{Text: s}}} }

// ToolUse returns a reply that calls one tool.
func ToolUse(name string, input any) Reply {
	return Reply{Blocks: []ReplyBlock{{Name: name, Input: input}}}
}

// Responder picks the reply to a request.
type Responder func(Request) Reply

// Server is an http.Handler for /v1/messages and /v1/messages/count_tokens.
type Server struct {
	respond Responder

	mu       sync.Mutex
	requests []Request
	key      string // when set, the only credential accepted
	ids      atomic.Int64
	models   atomic.Int64
}

// New returns a Server that answers with respond.
func New(respond Responder) *Server {
	return &Server{respond: respond}
}

// Requests returns a copy of every conversation request received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// RequireKey makes the server accept only key (as x-api-key or a bearer
// token) and answer every other request 401, as the API does for a key that
// is wrong or revoked. An empty key accepts any.
func (s *Server) RequireKey(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.key = key
}

// ModelListings is how many times GET /v1/models was asked.
func (s *Server) ModelListings() int64 { return s.models.Load() }

// authorized reports whether the request carries the required key.
func (s *Server) authorized(r *http.Request) bool {
	s.mu.Lock()
	key := s.key
	s.mu.Unlock()
	if key == "" {
		return true
	}
	bearer, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return r.Header.Get("x-api-key") == key || bearer == key
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/models" && r.Method == http.MethodGet {
		s.models.Add(1)
	}
	if !s.authorized(r) {
		writeAPIError(w, http.StatusUnauthorized, "authentication_error", "invalid x-api-key")
		return
	}
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/v1/models":
		writeJSON(w, http.StatusOK, map[string]any{"data": []any{map[string]any{
			"type": "model", "id": "scripted-model", "display_name": "Scripted model", "created_at": "2025-01-01T00:00:00Z"}},
			"has_more": false, "first_id": "scripted-model", "last_id": "scripted-model"})
	case r.Method == http.MethodPost && r.URL.Path == "/v1/messages/count_tokens":
		body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<20))
		writeJSON(w, http.StatusOK, map[string]int{"input_tokens": 1 + len(body)/4})
	case r.Method == http.MethodPost && r.URL.Path == "/v1/messages":
		s.messages(w, r)
	default:
		writeAPIError(w, http.StatusNotFound, "not_found_error", "no such endpoint: "+r.Method+" "+r.URL.Path)
	}
}

func (s *Server) messages(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 256<<20))
	if err != nil {
		writeAPIError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	var req Request
	if err := json.Unmarshal(body, &req); err != nil {
		writeAPIError(w, http.StatusBadRequest, "invalid_request_error", "body is not JSON: "+err.Error())
		return
	}
	req.Raw = body
	s.mu.Lock()
	s.requests = append(s.requests, req)
	s.mu.Unlock()

	reply := s.respond(req)
	switch reply.Status {
	case 0:
	case http.StatusUnauthorized:
		writeAPIError(w, reply.Status, "authentication_error", "invalid x-api-key")
		return
	case http.StatusTooManyRequests:
		w.Header().Set("retry-after", strconv.Itoa(max(reply.RetryAfter, 1)))
		writeAPIError(w, reply.Status, "rate_limit_error", "Number of requests has exceeded your rate limit")
		return
	case 529:
		writeAPIError(w, reply.Status, "overloaded_error", "Overloaded")
		return
	default:
		writeAPIError(w, reply.Status, "api_error", http.StatusText(reply.Status))
		return
	}
	if req.Stream {
		s.stream(w, r, req, reply)
		return
	}
	if reply.Drop {
		dropConnection(w)
		return
	}
	writeJSON(w, http.StatusOK, s.wholeMessage(req, reply))
}

func (s *Server) nextID(prefix string) string {
	return fmt.Sprintf("%s_%012d", prefix, s.ids.Add(1))
}

func (s *Server) wholeMessage(req Request, reply Reply) map[string]any {
	content := make([]map[string]any, 0, len(reply.Blocks))
	stop := "end_turn"
	for _, b := range reply.Blocks {
		if b.Name != "" {
			content = append(content, map[string]any{"type": "tool_use", "id": s.nextID("toolu"), "name": b.Name, "input": inputOf(b)})
			stop = "tool_use"
			continue
		}
		content = append(content, map[string]any{"type": "text", "text": b.Text})
	}
	return map[string]any{
		"id": s.nextID("msg"), "type": "message", "role": "assistant", "model": modelOf(req),
		"content": content, "stop_reason": stop, "stop_sequence": nil,
		"usage": reply.wholeUsage(),
	}
}

func (r Reply) inputTokens() int {
	if r.InputTokens > 0 {
		return r.InputTokens
	}
	return 10
}

// startUsage is the usage of message_start: everything but the output.
func (r Reply) startUsage() map[string]any {
	u := map[string]any{"input_tokens": r.inputTokens(), "output_tokens": 1}
	for k, v := range r.Usage {
		if k != "output_tokens" && k != "server_tool_use" {
			u[k] = v
		}
	}
	return u
}

// deltaUsage is the usage of message_delta: the output and server tools.
func (r Reply) deltaUsage() map[string]any {
	u := map[string]any{"output_tokens": 10}
	for _, k := range []string{"output_tokens", "server_tool_use"} {
		if v, ok := r.Usage[k]; ok {
			u[k] = v
		}
	}
	return u
}

// wholeUsage is the usage of a message that is not streamed.
func (r Reply) wholeUsage() map[string]any {
	u := r.startUsage()
	for k, v := range r.deltaUsage() {
		u[k] = v
	}
	return u
}

// stream writes the reply as the API's server-sent events.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, req Request, reply Reply) {
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	send := func(event string, data any) bool {
		b, err := json.Marshal(data)
		if err != nil {
			return false
		}
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b); err != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return r.Context().Err() == nil
	}
	wait := func() bool {
		if reply.Delay <= 0 {
			return true
		}
		t := time.NewTimer(reply.Delay)
		defer t.Stop()
		select {
		case <-t.C:
			return true
		case <-r.Context().Done():
			return false
		}
	}

	msgID := s.nextID("msg")
	if !send("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": msgID, "type": "message", "role": "assistant", "model": modelOf(req), "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": reply.startUsage(),
	}}) {
		return
	}
	if reply.Hang {
		<-r.Context().Done()
		return
	}
	stop := "end_turn"
	for i, b := range reply.Blocks {
		var start map[string]any
		var deltas []map[string]any
		if b.Name != "" {
			stop = "tool_use"
			start = map[string]any{"type": "tool_use", "id": s.nextID("toolu"), "name": b.Name, "input": map[string]any{}}
			in, _ := json.Marshal(inputOf(b))
			deltas = append(deltas, map[string]any{"type": "input_json_delta", "partial_json": string(in)})
		} else {
			start = map[string]any{"type": "text", "text": ""}
			for _, part := range chunks(b.Text, reply.ChunkSize) {
				deltas = append(deltas, map[string]any{"type": "text_delta", "text": part})
			}
		}
		if !send("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": start}) {
			return
		}
		for _, d := range deltas {
			if !wait() {
				return
			}
			if !send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": d}) {
				return
			}
			if reply.Drop {
				dropConnection(w)
				return
			}
			if reply.Malformed {
				fmt.Fprint(w, "event: content_block_delta\ndata: {not json at all\n\n")
				if flusher != nil {
					flusher.Flush()
				}
				return
			}
		}
		if !send("content_block_stop", map[string]any{"type": "content_block_stop", "index": i}) {
			return
		}
	}
	if !send("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": reply.deltaUsage()}) {
		return
	}
	send("message_stop", map[string]any{"type": "message_stop"})
}

func chunks(s string, size int) []string {
	if size <= 0 || len(s) <= size {
		return []string{s}
	}
	var out []string
	for len(s) > size {
		cut := size
		for cut > 0 && !utf8Start(s[cut]) {
			cut--
		}
		if cut == 0 {
			cut = size
		}
		out = append(out, s[:cut])
		s = s[cut:]
	}
	if s != "" {
		out = append(out, s)
	}
	return out
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

func inputOf(b ReplyBlock) any {
	if b.Input == nil {
		return map[string]any{}
	}
	return b.Input
}

func modelOf(req Request) string {
	if req.Model != "" {
		return req.Model
	}
	return "scripted-model"
}

// dropConnection hijacks the connection and closes it mid-response.
func dropConnection(w http.ResponseWriter) {
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		return
	}
	conn, buf, err := hj.Hijack()
	if err != nil {
		return
	}
	_ = buf.Flush()
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeAPIError(w http.ResponseWriter, status int, kind, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("x-should-retry", strconv.FormatBool(status == 429 || status >= 500))
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": "error", "error": map[string]string{"type": kind, "message": msg}})
}

// ReadSSE parses a stream of server-sent events into (event, data) pairs; it
// exists for the package's own tests and for tools that check a stream.
func ReadSSE(r io.Reader) ([][2]string, error) {
	var out [][2]string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	var event string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			out = append(out, [2]string{event, strings.TrimPrefix(line, "data: ")})
		}
	}
	return out, sc.Err()
}
