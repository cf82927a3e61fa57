package httpapi_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/majorhq/major/httpapi/httpapitest"
	"github.com/majorhq/major/supervisor"
)

// The streams' delivery guarantees, on the fake CLI: every client sees
// the same numbered events, a client that drops loses nothing, a stalled
// client holds up nobody, and a message sent again after a dropped stream
// is answered once.

func seqOf(tb testing.TB, ev httpapitest.Event) int64 {
	tb.Helper()
	var n int64
	if err := json.Unmarshal(ev["seq"], &n); err != nil || n <= 0 {
		tb.Fatalf("event without seq: %v", ev)
	}
	return n
}

func TestTwoClientsAndReconnect(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	id := h.NewSession(t)
	a, closeA := h.Attach(t, id, "")
	defer closeA()
	b, closeB := h.Attach(t, id, "")

	code, out := h.Call(t, "POST", "/api/claude/sessions/"+id+"/messages", "sebastian", map[string]any{"message": "six ticks"})
	if code != http.StatusAccepted {
		t.Fatalf("post message: %d %v", code, out)
	}
	cli := h.turn(t, "six ticks")
	for range 5 {
		cli.Stream("tick ")
	}
	cli.Reply("tick ")
	evA := httpapitest.Until(t, a, "done")
	// B reads a few events, drops, and re-attaches with its last seq.
	var seen []httpapitest.Event
	for len(seen) < 5 {
		ev := <-b
		if httpapitest.Str(ev, "type") != "ping" {
			seen = append(seen, ev)
		}
	}
	closeB()
	last := seqOf(t, seen[len(seen)-1])
	b2, closeB2 := h.Attach(t, id, "after="+httpapitest.JSONBody(last))
	defer closeB2()
	seen = append(seen, httpapitest.Until(t, b2, "done")...)

	if len(seen) != len(evA) {
		t.Fatalf("client B saw %d events, A %d", len(seen), len(evA))
	}
	for i := range evA {
		if seqOf(t, evA[i]) != int64(i+1) {
			t.Fatalf("A: seq %d at %d: not gap-free from 1", seqOf(t, evA[i]), i)
		}
		ja, _ := json.Marshal(evA[i])
		jb, _ := json.Marshal(seen[i])
		if string(ja) != string(jb) {
			t.Fatalf("event %d differs:\nA %s\nB %s", i, ja, jb)
		}
	}
	types := map[string]int{}
	for _, ev := range evA {
		types[httpapitest.Str(ev, "type")]++
	}
	if types["turn_start"] != 1 || types["cli"] == 0 || types["text"] != 6 || types["done"] != 1 {
		t.Fatalf("event types %v", types)
	}
	// The CLI's own events arrive unchanged under "event".
	for _, ev := range evA {
		if httpapitest.Str(ev, "type") == "cli" {
			var inner httpapitest.Event
			if err := json.Unmarshal(ev["event"], &inner); err != nil || httpapitest.Str(inner, "type") == "" {
				t.Fatalf("cli event without the CLI's object: %v", ev)
			}
		}
	}

	// ?types= filters.
	f, closeF := h.Attach(t, id, "types=done,turn_start")
	defer closeF()
	got := httpapitest.Until(t, f, "done")
	if len(got) != 2 || httpapitest.Str(got[0], "type") != "turn_start" {
		t.Fatalf("filtered replay: %v", got)
	}
}

func TestClientDisconnectTurnContinues(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{ping: 20 * time.Millisecond})
	id := h.NewSession(t)
	resp := h.Request(t, "POST", "/api/claude/chat-stream", "sebastian", "", httpapitest.JSONBody(map[string]any{"message": "ten ticks", "session_id": id}))
	cli := h.turn(t, "ten ticks")
	sc := bufio.NewScanner(resp.Body)
	pings, streamed := 0, false
	for sc.Scan() {
		if strings.Contains(sc.Text(), `"ping"`) {
			pings++
			if !streamed { // the answer starts only after a ping came
				cli.Stream("tick ")
				streamed = true
			}
		}
		if strings.Contains(sc.Text(), "tick") {
			break
		}
	}
	resp.Body.Close() // the phone goes to sleep
	if pings == 0 {
		t.Fatal("no ping while the answer had not started")
	}
	for range 8 {
		cli.Stream("tick ")
	}
	cli.Reply("tick ")
	a, closeA := h.Attach(t, id, "types=text,done")
	defer closeA()
	evs := httpapitest.Until(t, a, "done")
	var text strings.Builder
	for _, ev := range evs {
		text.WriteString(httpapitest.Str(ev, "delta"))
	}
	if text.String() != strings.Repeat("tick ", 10) {
		t.Fatalf("turn did not complete after the client left: %q", text.String())
	}
}

func TestStalledClientBlocksNobody(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{subBuf: 8})
	id := h.NewSession(t)
	// A client that attaches and then never reads, with a tiny receive
	// buffer so the kernel cannot soak up the stream for it.
	stalled := stalledClient(t, h.url+"/api/claude/sessions/"+id+"/events")
	defer stalled.Body.Close()
	reader, closeReader := h.Attach(t, id, "types=text,done")
	defer closeReader()

	h.Call(t, "POST", "/api/claude/sessions/"+id+"/messages", "sebastian", map[string]any{"message": "eight megabytes"})
	cli := h.turn(t, "eight megabytes")
	const size = 2 << 20 // more than the server's socket buffers hold
	chunk := strings.Repeat("x", 4096)
	// The answer streams about as fast as the reading client reads it (a
	// few chunks ahead), as the CLI's would; the stalled client reads
	// nothing.
	var read atomic.Int64
	published := make(chan struct{})
	go func() {
		defer close(published)
		for i := range size / len(chunk) {
			for int64(i)-read.Load() > 4 {
				time.Sleep(50 * time.Microsecond)
			}
			if i == size/len(chunk)-1 {
				cli.Reply(chunk)
			} else {
				cli.Stream(chunk)
			}
		}
	}()
	var n int
	for ev := range reader {
		if httpapitest.Str(ev, "type") == "done" {
			break
		}
		n += len(httpapitest.Str(ev, "delta"))
		read.Add(1)
	}
	<-published // the CLI's side was never held up
	if n != size {
		t.Fatalf("the reading client got %d bytes, want %d", n, size)
	}
	if cli.State() != supervisor.StateIdle {
		t.Fatal("turn did not finish while a client stalled")
	}
	// The stalled client was cut off (it may re-attach with its last seq).
	var out strings.Builder
	h.sessions.Metrics().ServeHTTP(metricsWriter{&out}, nil)
	if !strings.Contains(out.String(), "major_dropped_subscribers_total 1\n") {
		t.Fatalf("stalled client not cut off:\n%s", out.String())
	}
}

// stalledClient attaches with a 4 KiB receive buffer and reads nothing.
func stalledClient(tb testing.TB, url string) *http.Response {
	tb.Helper()
	dialer := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	client := &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext}}
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("X-Notes-Person", "sebastian")
	resp, err := client.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	if resp.StatusCode != 200 {
		tb.Fatalf("attach: %d", resp.StatusCode)
	}
	tb.Cleanup(client.CloseIdleConnections)
	return resp
}

// metricsWriter is a minimal http.ResponseWriter over a strings.Builder.
type metricsWriter struct{ b *strings.Builder }

func (w metricsWriter) Header() http.Header         { return http.Header{} }
func (w metricsWriter) Write(p []byte) (int, error) { return w.b.Write(p) }
func (w metricsWriter) WriteHeader(int)             {}

// A message whose stream dropped and that the app sends again is the
// same message: the resend shows its whole answer and the CLI gets it
// once.
func TestResendAfterDroppedStreamShowsWholeAnswer(t *testing.T) {
	t.Parallel()
	// Only [[say ...]] is answered at once; the test streams the others.
	h := newHarness(t, harnessOpts{reply: func(m string) (string, bool) {
		if strings.HasPrefix(m, "[[say ") {
			return scriptedReply(m)
		}
		return "", false
	}})
	ticks := strings.Repeat("tick ", 8)
	// answer streams the running turn on message: one tick, then (after
	// the test dropped and resent) the other seven.
	started := func(message string) func() {
		cli := h.turn(t, message)
		cli.Stream("tick ")
		return func() {
			for range 6 {
				cli.Stream("tick ")
			}
			cli.Reply("tick ")
		}
	}

	// The first message of a conversation (no session id yet, form-encoded
	// as the Android app sends it) drops mid-answer; the app sends it again.
	first := "first"
	s := h.OpenStream(t, httpapitest.FormType, httpapitest.Form(first, ""))
	finish := started(first)
	s.UpTo(t, "text")
	s.Drop()
	resent := h.OpenStream(t, httpapitest.FormType, httpapitest.Form(first, ""))
	finish() // the turn goes on after the resend attached to it
	evs := resent.Rest(t)
	httpapitest.CheckCompat(t, evs)
	if got := httpapitest.StreamText(evs); got != ticks {
		t.Fatalf("resent first message streamed %q, want the whole answer %q", got, ticks)
	}
	sid := httpapitest.Str(evs[len(evs)-1], "session_id")

	// A later message (JSON, as llm.html's JSON variant) drops and is sent
	// again while its turn still runs.
	running := "running"
	body := httpapitest.JSONBody(map[string]any{"message": running, "session_id": sid})
	s = h.OpenStream(t, "application/json", body)
	finish = started(running)
	s.UpTo(t, "text")
	s.Drop()
	resent = h.OpenStream(t, "application/json", body)
	finish()
	evs = resent.Rest(t)
	httpapitest.CheckCompat(t, evs)
	if got := httpapitest.StreamText(evs); got != ticks || httpapitest.Str(evs[len(evs)-1], "session_id") != sid {
		t.Fatalf("resent running message streamed %q in %v", got, evs)
	}

	// One drops and the turn ends before the resend arrives. (The server
	// notices a drop before the turn ends: a connection closed in the
	// very instant its done line is written cannot be told from one
	// closed by the client that read it.)
	finished := "finished"
	s = h.OpenStream(t, httpapitest.FormType, httpapitest.Form(finished, sid))
	finish = started(finished)
	s.UpTo(t, "text")
	s.Drop()
	h.gone(t, sid)
	finish()
	a, closeA := h.Attach(t, sid, "types=done")
	httpapitest.Until(t, a, "done")
	closeA()
	evs = h.OpenStream(t, httpapitest.FormType, httpapitest.Form(finished, sid)).Rest(t)
	httpapitest.CheckCompat(t, evs)
	if got := httpapitest.StreamText(evs); got != ticks {
		t.Fatalf("resent finished message streamed %q, want its whole answer", got)
	}

	// A message whose answer was delivered and that the person sends again
	// is a new message.
	again := "[[say same again]]"
	for range 2 {
		_, evs = h.ChatStream(t, "sebastian", httpapitest.FormType, httpapitest.Form(again, sid))
		httpapitest.CheckCompat(t, evs)
		if httpapitest.StreamText(evs) != "same again" {
			t.Fatalf("repeated message: %v", evs)
		}
	}
	if got, want := strings.Join(h.fakes.CLI(sid).Sent(), " | "), strings.Join([]string{first, running, finished, again, again}, " | "); got != want {
		t.Fatalf("the CLI got:\n %q\nwant %q", got, want)
	}
}

func TestConcurrentMessagesAnsweredInOrder(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{reply: scriptedReply})
	_, evs := h.ChatStream(t, "sebastian", httpapitest.FormType, httpapitest.Form("[[say hi]]", ""))
	sid := httpapitest.Str(evs[len(evs)-1], "session_id")
	q, closeQ := h.Attach(t, sid, "types=queued,turn_start")
	defer closeQ()

	slow := "[[hang]]"
	s := h.OpenStream(t, httpapitest.FormType, httpapitest.Form(slow, sid))
	cli := h.turn(t, slow)
	cli.Stream("tick ")
	s.UpTo(t, "text")
	// Two more at once while the first runs: both wait and are answered.
	msgs := []string{"[[recall]] b", "[[recall]] c"}
	got := make([][]httpapitest.Event, len(msgs))
	var wg sync.WaitGroup
	for i, m := range msgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctype, body := httpapitest.FormType, httpapitest.Form(m, sid)
			if i == 1 {
				ctype, body = "application/json", httpapitest.JSONBody(map[string]any{"message": m, "session_id": sid})
			}
			resp := h.Request(t, "POST", "/api/claude/chat-stream", "sebastian", ctype, body)
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b, _ := io.ReadAll(resp.Body)
				t.Errorf("%q: %d %s", m, resp.StatusCode, b)
				return
			}
			got[i] = httpapitest.Lines(t, resp.Body)
		}()
	}
	// Both wait in the queue before the running turn ends.
	var queued, started []string
	for len(queued) < 2 {
		for _, e := range httpapitest.Until(t, q, "queued") {
			if m := httpapitest.Str(e, "message"); httpapitest.Str(e, "type") == "queued" {
				queued = append(queued, m)
			} else {
				started = append(started, m)
			}
		}
	}
	for range 4 {
		cli.Stream("tick ")
	}
	cli.Reply("")
	first := s.Rest(t)
	wg.Wait()
	if t.Failed() {
		return
	}
	httpapitest.CheckCompat(t, first)
	if httpapitest.StreamText(first) != strings.Repeat("tick ", 5) {
		t.Fatalf("the running turn: %v", first)
	}
	prefix := "HISTORY: [[say hi]] | " + slow + " | "
	var texts []string
	for i := range msgs {
		var evs []httpapitest.Event
		for _, ev := range got[i] {
			if httpapitest.Str(ev, "type") != "ping" {
				evs = append(evs, ev)
			}
		}
		httpapitest.CheckCompat(t, evs)
		texts = append(texts, httpapitest.StreamText(evs))
	}
	// Whichever came second saw the other before it.
	b, c := texts[0], texts[1]
	if !(b == prefix+msgs[0] && c == prefix+msgs[0]+" | "+msgs[1]) && !(c == prefix+msgs[1] && b == prefix+msgs[1]+" | "+msgs[0]) {
		t.Fatalf("queued answers:\n b %q\n c %q", b, c)
	}
	// The events stream showed them queued, and their turns ran in that
	// order.
	for len(started) < 4 {
		for _, e := range httpapitest.Until(t, q, "turn_start") {
			if httpapitest.Str(e, "type") == "turn_start" {
				started = append(started, httpapitest.Str(e, "message"))
			}
		}
	}
	if strings.Join(queued, "|") != strings.Join(started[2:], "|") {
		t.Fatalf("queued %v, started %v", queued, started)
	}
}

// The same words sent again after the client has read its answer's done
// are a new message (a person saying "yes" twice), never a resend joined
// to the answer already delivered: the answer counts as delivered before
// its last line goes out, not after, and the client closing the
// connection once it has read that line (as the apps do) does not undo it.
func TestSameMessageRightAfterDoneIsNew(t *testing.T) {
	t.Parallel()
	// The server's goroutine is held up right after its done line went
	// out, as a busy machine may do, while the client reads on.
	h := newHarness(t, harnessOpts{reply: scriptedReply, wrap: func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(&pausingWriter{ResponseWriter: w}, r)
		})
	}})
	const msg = "[[say again]]"
	sid := ""
	for i := range 4 {
		// Like the apps, the client takes done as the end and does not
		// wait for the response to close.
		s := h.OpenStream(t, "application/json", httpapitest.JSONBody(map[string]any{"message": msg, "session_id": sid}))
		sid = httpapitest.Str(s.UpTo(t, "done"), "session_id")
		s.Drop()
		if i%2 == 1 {
			// This time the server is done with the stream, and has
			// seen it closed, before the same words come again.
			h.gone(t, sid)
		}
		if n := h.timesSent(msg); n != i+1 {
			t.Fatalf("after %d messages the CLI got %d: one was taken for a resend of the answer just read", i+1, n)
		}
	}
}

// pausingWriter pauses for a moment after flushing a done line.
type pausingWriter struct {
	http.ResponseWriter
	done bool
}

func (w *pausingWriter) Write(b []byte) (int, error) {
	w.done = w.done || bytes.Contains(b, []byte(`"type":"done"`))
	return w.ResponseWriter.Write(b)
}

func (w *pausingWriter) Flush() {
	http.NewResponseController(w.ResponseWriter).Flush()
	if w.done {
		time.Sleep(100 * time.Millisecond)
	}
}

func (w *pausingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
