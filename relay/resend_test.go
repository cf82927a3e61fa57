package relay_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/majorhq/major/supervisor"
)

const formType = "application/x-www-form-urlencoded"

// liveStream is a chat-stream response read line by line, as the seed
// clients read it.
type liveStream struct {
	resp *http.Response
	sc   *bufio.Scanner
	evs  []map[string]json.RawMessage
}

// openStream posts a chat-stream request as the seed clients do and
// returns once the response headers are in.
func (h *harness) openStream(tb testing.TB, ctype, body string) *liveStream {
	tb.Helper()
	resp := h.request(tb, "POST", "/api/claude/chat-stream", "sebastian", ctype, body)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		tb.Fatalf("chat-stream: %d %s", resp.StatusCode, b)
	}
	tb.Cleanup(func() { resp.Body.Close() })
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	return &liveStream{resp: resp, sc: sc}
}

// next reads one line; false at the end of the stream.
func (s *liveStream) next(tb testing.TB) (map[string]json.RawMessage, bool) {
	tb.Helper()
	if !s.sc.Scan() {
		return nil, false
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(s.sc.Bytes(), &m); err != nil {
		tb.Fatalf("line is not a JSON object: %q", s.sc.Text())
	}
	s.evs = append(s.evs, m)
	return m, true
}

// upTo reads up to and including the first line of type typ.
func (s *liveStream) upTo(tb testing.TB, typ string) map[string]json.RawMessage {
	tb.Helper()
	for {
		ev, ok := s.next(tb)
		if !ok {
			tb.Fatalf("stream ended before a %s line: %v", typ, s.evs)
		}
		if str(ev, "type") == typ {
			return ev
		}
	}
}

// rest reads to the end and returns every line of the stream, pings left
// out.
func (s *liveStream) rest(tb testing.TB) []map[string]json.RawMessage {
	tb.Helper()
	for {
		if _, ok := s.next(tb); !ok {
			break
		}
	}
	var out []map[string]json.RawMessage
	for _, ev := range s.evs {
		if str(ev, "type") != "ping" {
			out = append(out, ev)
		}
	}
	return out
}

// drop closes the connection, as a phone losing its network does.
func (s *liveStream) drop() { s.resp.Body.Close() }

// timesSent is how many model requests carried text as the person's newest
// message: each message the model is asked about once gives one.
func (h *harness) timesSent(text string) int {
	n := 0
	for _, r := range h.env.Model.Requests() {
		if len(r.ToolResults()) == 0 && r.LastUserText() == text {
			n++
		}
	}
	return n
}

func form(message, sessionID string) string {
	v := url.Values{"message": {message}}
	if sessionID != "" {
		v.Set("session_id", sessionID)
	}
	return v.Encode()
}

func TestResendAfterDroppedStreamShowsWholeAnswer(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	ticks := strings.Repeat("tick ", 8)

	// The first message of a conversation (no session id yet, form-encoded
	// as the Android app sends it) drops mid-answer; the app sends it again.
	first := "[[slow 8 150]] first"
	s := h.openStream(t, formType, form(first, ""))
	s.upTo(t, "text")
	s.drop()
	evs := h.openStream(t, formType, form(first, "")).rest(t)
	checkCompat(t, evs)
	if got := streamText(evs); got != ticks {
		t.Fatalf("resent first message streamed %q, want the whole answer %q", got, ticks)
	}
	sid := str(evs[len(evs)-1], "session_id")

	// A later message (JSON, as llm.html's JSON variant) drops and is sent
	// again while its turn still runs.
	running := "[[slow 8 150]] running"
	s = h.openStream(t, "application/json", jsonBody(map[string]any{"message": running, "session_id": sid}))
	s.upTo(t, "text")
	s.drop()
	evs = h.openStream(t, "application/json", jsonBody(map[string]any{"message": running, "session_id": sid})).rest(t)
	checkCompat(t, evs)
	if got := streamText(evs); got != ticks || str(evs[len(evs)-1], "session_id") != sid {
		t.Fatalf("resent running message streamed %q in %v", got, evs)
	}

	// One drops and the turn ends before the resend arrives.
	finished := "[[slow 4 50]] finished"
	s = h.openStream(t, formType, form(finished, sid))
	s.upTo(t, "text")
	s.drop()
	a, closeA := h.attach(t, sid, "types=done")
	until(t, a, "done") // the answer that was streaming is complete
	closeA()
	evs = h.openStream(t, formType, form(finished, sid)).rest(t)
	checkCompat(t, evs)
	if got := streamText(evs); got != strings.Repeat("tick ", 4) {
		t.Fatalf("resent finished message streamed %q, want its whole answer", got)
	}

	// A message whose answer was delivered and that the person sends again
	// is a new message.
	again := "[[say same again]]"
	for range 2 {
		_, evs = h.chatStream(t, "sebastian", formType, form(again, sid))
		checkCompat(t, evs)
		if streamText(evs) != "same again" {
			t.Fatalf("repeated message: %v", evs)
		}
	}

	for text, want := range map[string]int{first: 1, running: 1, finished: 1, again: 2} {
		if got := h.timesSent(text); got != want {
			t.Errorf("the model was asked about %q %d times, want %d", text, got, want)
		}
	}
	_, evs = h.chatStream(t, "sebastian", "", jsonBody(map[string]any{"message": "[[recall]]", "session_id": sid}))
	want := "HISTORY: " + strings.Join([]string{first, running, finished, again, again, "[[recall]]"}, " | ")
	if got := streamText(evs); got != want {
		t.Fatalf("the model's history:\n got %q\nwant %q", got, want)
	}
}

func TestConcurrentMessagesAnsweredInOrder(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	_, evs := h.chatStream(t, "sebastian", formType, form("[[say hi]]", ""))
	sid := str(evs[len(evs)-1], "session_id")
	q, closeQ := h.attach(t, sid, "types=queued,turn_start")
	defer closeQ()

	slow := "[[slow 5 100]] a"
	s := h.openStream(t, formType, form(slow, sid))
	s.upTo(t, "text")
	// Two more at once while the first runs: both wait and are answered.
	msgs := []string{"[[recall]] b", "[[recall]] c"}
	got := make([][]map[string]json.RawMessage, len(msgs))
	var wg sync.WaitGroup
	for i, m := range msgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctype, body := formType, form(m, sid)
			if i == 1 {
				ctype, body = "application/json", jsonBody(map[string]any{"message": m, "session_id": sid})
			}
			resp := h.request(t, "POST", "/api/claude/chat-stream", "sebastian", ctype, body)
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b, _ := io.ReadAll(resp.Body)
				t.Errorf("%q: %d %s", m, resp.StatusCode, b)
				return
			}
			got[i] = lines(t, resp.Body)
		}()
	}
	first := s.rest(t)
	wg.Wait()
	if t.Failed() {
		return
	}
	checkCompat(t, first)
	if streamText(first) != strings.Repeat("tick ", 5) {
		t.Fatalf("the running turn: %v", first)
	}
	prefix := "HISTORY: [[say hi]] | " + slow + " | "
	var texts []string
	for i := range msgs {
		var evs []map[string]json.RawMessage
		for _, ev := range got[i] {
			if str(ev, "type") != "ping" {
				evs = append(evs, ev)
			}
		}
		checkCompat(t, evs)
		texts = append(texts, streamText(evs))
	}
	// Whichever came second saw the other before it.
	b, c := texts[0], texts[1]
	if !(b == prefix+msgs[0] && c == prefix+msgs[0]+" | "+msgs[1]) && !(c == prefix+msgs[1] && b == prefix+msgs[1]+" | "+msgs[0]) {
		t.Fatalf("queued answers:\n b %q\n c %q", b, c)
	}
	// The events stream showed them queued, and their turns ran in that
	// order.
	var queued, started []string
	for len(started) < 4 {
		for _, e := range until(t, q, "turn_start") {
			if m := str(e, "message"); str(e, "type") == "queued" {
				queued = append(queued, m)
			} else {
				started = append(started, m)
			}
		}
	}
	if len(queued) != 2 || strings.Join(queued, "|") != strings.Join(started[2:], "|") {
		t.Fatalf("queued %v, started %v", queued, started)
	}
}

func TestChatStreamHeadersBeforeFirstEvent(t *testing.T) {
	t.Parallel()
	pool := supervisor.NewPool(supervisor.PoolConfig{Max: 1, SlotWait: 2 * time.Minute})
	t.Cleanup(pool.Close)
	h := newHarness(t, harnessOpts{pool: pool})
	// One session holds the only process slot with a turn that does not end.
	busy := h.newSession(t)
	a, closeA := h.attach(t, busy, "types=text,turn_start,done")
	defer closeA()
	if code, out := h.call(t, "POST", "/api/claude/sessions/"+busy+"/messages", "sebastian", map[string]any{"message": "[[hang]]"}); code != http.StatusAccepted {
		t.Fatalf("busy message: %d %v", code, out)
	}
	until(t, a, "turn_start")

	// A new conversation from the phone: the headers and a status come at
	// once while it waits for the slot.
	got := make(chan *http.Response, 1)
	go func() {
		req, _ := http.NewRequest("POST", h.url+"/api/claude/chat-stream", strings.NewReader(form("[[say after the wait]]", "")))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("X-Notes-Person", "sebastian")
		req.Header.Set("Accept", "application/x-ndjson")
		req.Header.Set("Content-Type", formType)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			close(got)
			return
		}
		got <- resp
	}()
	var resp *http.Response
	select {
	case resp = <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("no response headers while the message waits for a slot")
	}
	if resp == nil || resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("response while waiting for a slot: %v", resp)
	}
	t.Cleanup(func() { resp.Body.Close() })
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	s := &liveStream{resp: resp, sc: sc}
	first, ok := s.next(t)
	if !ok || str(first, "type") != "status" || !strings.HasPrefix(str(first, "message"), "Waiting for a free assistant process") {
		t.Fatalf("first line while waiting: %v", first)
	}
	// The slot frees when the other turn ends; the message then runs.
	if code, out := h.call(t, "POST", "/api/claude/sessions/"+busy+"/interrupt", "sebastian", nil); code != 200 {
		t.Fatalf("interrupt: %d %v", code, out)
	}
	evs := s.rest(t)
	checkCompat(t, evs)
	if streamText(evs) != "after the wait" {
		t.Fatalf("the waiting message: %v", evs)
	}
}
