// Package httpapitest is a test client of the HTTP API as the seed clients
// and our own web client use it: authenticated requests, NDJSON streams
// read line by line, and the strict check of the compat event shapes. It
// holds no server; tests of httpapi (on a fake CLI) and of relay (on the
// real CLI) both drive their servers through it.
package httpapitest

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Event is one NDJSON line, each value left raw.
type Event = map[string]json.RawMessage

// FormType is the seed clients' form encoding.
const FormType = "application/x-www-form-urlencoded"

// Client talks to one server with one bearer token.
type Client struct {
	URL   string
	Token string
}

// Request sends a request as person; body is JSON unless ctype says
// otherwise.
func (c Client) Request(tb testing.TB, method, path, person, ctype, body string) *http.Response {
	tb.Helper()
	req, err := http.NewRequest(method, c.URL+path, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	req.Header.Set("X-Notes-Person", person)
	req.Header.Set("Accept", "application/x-ndjson")
	if ctype == "" {
		ctype = "application/json"
	}
	req.Header.Set("Content-Type", ctype)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	return resp
}

// Call sends a request and decodes a JSON object answer.
func (c Client) Call(tb testing.TB, method, path, person string, body any) (int, map[string]any) {
	tb.Helper()
	s := ""
	if body != nil {
		s = JSONBody(body)
	}
	resp := c.Request(tb, method, path, person, "", s)
	defer resp.Body.Close()
	var out map[string]any
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &out); err != nil {
		tb.Fatalf("%s %s: answer is not a JSON object: %q", method, path, b)
	}
	return resp.StatusCode, out
}

// NewSession creates an empty session for sebastian.
func (c Client) NewSession(tb testing.TB) string {
	tb.Helper()
	code, out := c.Call(tb, "POST", "/api/claude/sessions", "sebastian", nil)
	if code != http.StatusCreated {
		tb.Fatalf("create session: %d %v", code, out)
	}
	return out["id"].(string)
}

// ChatStream posts a chat-stream request and reads the whole answer; on a
// status other than 200 it returns the status and no events.
func (c Client) ChatStream(tb testing.TB, person, ctype, body string) (int, []Event) {
	tb.Helper()
	resp := c.Request(tb, "POST", "/api/claude/chat-stream", person, ctype, body)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		tb.Logf("chat-stream: %d %s", resp.StatusCode, b)
		return resp.StatusCode, nil
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		tb.Fatalf("content type %q", ct)
	}
	return resp.StatusCode, Lines(tb, resp.Body)
}

// Attach opens a session's events stream as sebastian and delivers its
// lines on a channel; the func detaches.
func (c Client) Attach(tb testing.TB, id, query string) (<-chan Event, func()) {
	tb.Helper()
	resp := c.Request(tb, "GET", "/api/claude/sessions/"+id+"/events?"+query, "sebastian", "", "")
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		tb.Fatalf("attach: %d %s", resp.StatusCode, b)
	}
	ch := make(chan Event, 10000)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(ch)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			var m Event
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				ch <- m
			}
		}
	}()
	return ch, func() { resp.Body.Close(); wg.Wait() }
}

// Until reads events up to and including the first one of type typ,
// pings left out.
func Until(tb testing.TB, ch <-chan Event, typ string) []Event {
	tb.Helper()
	var out []Event
	timeout := time.NewTimer(60 * time.Second)
	defer timeout.Stop()
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				tb.Fatalf("stream ended before a %s event; got %d events", typ, len(out))
			}
			if Str(ev, "type") == "ping" {
				continue
			}
			out = append(out, ev)
			if Str(ev, "type") == typ {
				return out
			}
		case <-timeout.C:
			tb.Fatalf("no %s event within 60s", typ)
		}
	}
}

// LiveStream is a chat-stream response read line by line, as the seed
// clients read it.
type LiveStream struct {
	resp *http.Response
	sc   *bufio.Scanner
	// Events are the lines read so far.
	Events []Event
}

// OpenStream posts a chat-stream request as sebastian, the way the seed
// clients do, and returns once the response headers are in.
func (c Client) OpenStream(tb testing.TB, ctype, body string) *LiveStream {
	tb.Helper()
	resp := c.Request(tb, "POST", "/api/claude/chat-stream", "sebastian", ctype, body)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		tb.Fatalf("chat-stream: %d %s", resp.StatusCode, b)
	}
	tb.Cleanup(func() { resp.Body.Close() })
	return ReadStream(resp)
}

// ReadStream reads an NDJSON response line by line.
func ReadStream(resp *http.Response) *LiveStream {
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	return &LiveStream{resp: resp, sc: sc}
}

// Header is the response's header.
func (s *LiveStream) Header() http.Header { return s.resp.Header }

// streamWait bounds a test's wait for one line, and for the line UpTo
// looks for (pings keep a stream alive): a stream that hangs fails the
// test with what it read instead of holding it to the package's timeout.
const streamWait = time.Minute

// Next reads one line; false at the end of the stream.
func (s *LiveStream) Next(tb testing.TB) (Event, bool) {
	tb.Helper()
	var late atomic.Bool
	timer := time.AfterFunc(streamWait, func() {
		late.Store(true)
		s.resp.Body.Close()
	})
	ok := s.sc.Scan()
	timer.Stop()
	if late.Load() {
		tb.Fatalf("no line within %s; read so far:\n%s", streamWait, s.read())
	}
	if !ok {
		return nil, false
	}
	var m Event
	if err := json.Unmarshal(s.sc.Bytes(), &m); err != nil {
		tb.Fatalf("line is not a JSON object: %q", s.sc.Text())
	}
	s.Events = append(s.Events, m)
	return m, true
}

// read is the lines read so far, one per line.
func (s *LiveStream) read() string {
	var b strings.Builder
	for _, ev := range s.Events {
		line, _ := json.Marshal(ev)
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.String()
}

// UpTo reads up to and including the first line of type typ.
func (s *LiveStream) UpTo(tb testing.TB, typ string) Event {
	tb.Helper()
	for deadline := time.Now().Add(streamWait); ; {
		if time.Now().After(deadline) {
			tb.Fatalf("no %s line within %s; read so far:\n%s", typ, streamWait, s.read())
		}
		ev, ok := s.Next(tb)
		if !ok {
			tb.Fatalf("stream ended before a %s line: %v", typ, s.Events)
		}
		if Str(ev, "type") == typ {
			return ev
		}
	}
}

// Rest reads to the end and returns every line of the stream, pings left
// out.
func (s *LiveStream) Rest(tb testing.TB) []Event {
	tb.Helper()
	for {
		if _, ok := s.Next(tb); !ok {
			break
		}
	}
	var out []Event
	for _, ev := range s.Events {
		if Str(ev, "type") != "ping" {
			out = append(out, ev)
		}
	}
	return out
}

// Drop closes the connection, as a phone losing its network does.
func (s *LiveStream) Drop() { s.resp.Body.Close() }

// Lines reads NDJSON lines until EOF.
func Lines(tb testing.TB, r io.Reader) []Event {
	tb.Helper()
	var out []Event
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "" {
			tb.Fatalf("blank line in the stream")
		}
		var m Event
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			tb.Fatalf("line is not a JSON object: %q", sc.Text())
		}
		out = append(out, m)
	}
	return out
}

// Str is a string value of an event ("" when absent or not a string).
func Str(m Event, key string) string {
	var s string
	_ = json.Unmarshal(m[key], &s)
	return s
}

// Keys is an event's keys, sorted and comma-joined.
func Keys(m Event) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return strings.Join(ks, ",")
}

// JSONBody is v as a JSON request body.
func JSONBody(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// Form is a seed client's form-encoded message.
func Form(message, sessionID string) string {
	v := url.Values{"message": {message}}
	if sessionID != "" {
		v.Set("session_id", sessionID)
	}
	return v.Encode()
}

// StreamText joins the text deltas of a stream.
func StreamText(evs []Event) string {
	var sb strings.Builder
	for _, ev := range evs {
		if Str(ev, "type") == "text" {
			sb.WriteString(Str(ev, "delta"))
		}
	}
	return sb.String()
}

// compatKeys is the exact key set of each compat event (shared/seeds/004).
var compatKeys = map[string]string{
	"text":   "delta,type",
	"status": "message,type",
	"tool":   "input,name,type",
	"ping":   "type",
	"done":   "session_id,type",
	"error":  "message,type",
}

// CheckCompat fails unless every line is a compat event with exactly the
// seed's keys and the turn ends with exactly one done or error, last.
func CheckCompat(tb testing.TB, evs []Event) {
	tb.Helper()
	terminal := 0
	for i, ev := range evs {
		typ := Str(ev, "type")
		want, ok := compatKeys[typ]
		if !ok {
			tb.Fatalf("event %d has a type compat clients do not know: %s", i, typ)
		}
		if got := Keys(ev); got != want {
			tb.Fatalf("%s event keys = %s, want exactly %s", typ, got, want)
		}
		if typ == "done" || typ == "error" {
			terminal++
			if i != len(evs)-1 {
				tb.Fatalf("terminal %s event is not the last line", typ)
			}
		}
	}
	if terminal != 1 {
		tb.Fatalf("turn ended with %d done/error events, want exactly 1: %v", terminal, evs)
	}
}
