package relay_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/majorhq/major/httpapi/httpapitest"
	"github.com/majorhq/major/supervisor"
)

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

func TestResendAfterDroppedStreamShowsWholeAnswer(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	ticks := strings.Repeat("tick ", 8)

	// The first message of a conversation (no session id yet, form-encoded
	// as the Android app sends it) drops mid-answer; the app sends it again.
	first := "[[slow 8 150]] first"
	s := h.OpenStream(t, httpapitest.FormType, httpapitest.Form(first, ""))
	s.UpTo(t, "text")
	s.Drop()
	evs := h.OpenStream(t, httpapitest.FormType, httpapitest.Form(first, "")).Rest(t)
	httpapitest.CheckCompat(t, evs)
	if got := httpapitest.StreamText(evs); got != ticks {
		t.Fatalf("resent first message streamed %q, want the whole answer %q", got, ticks)
	}
	sid := httpapitest.Str(evs[len(evs)-1], "session_id")

	// A later message (JSON, as llm.html's JSON variant) drops and is sent
	// again while its turn still runs.
	running := "[[slow 8 150]] running"
	s = h.OpenStream(t, "application/json", httpapitest.JSONBody(map[string]any{"message": running, "session_id": sid}))
	s.UpTo(t, "text")
	s.Drop()
	evs = h.OpenStream(t, "application/json", httpapitest.JSONBody(map[string]any{"message": running, "session_id": sid})).Rest(t)
	httpapitest.CheckCompat(t, evs)
	if got := httpapitest.StreamText(evs); got != ticks || httpapitest.Str(evs[len(evs)-1], "session_id") != sid {
		t.Fatalf("resent running message streamed %q in %v", got, evs)
	}

	// One drops and the turn ends before the resend arrives.
	finished := "[[slow 4 50]] finished"
	s = h.OpenStream(t, httpapitest.FormType, httpapitest.Form(finished, sid))
	s.UpTo(t, "text")
	s.Drop()
	a, closeA := h.Attach(t, sid, "types=done")
	httpapitest.Until(t, a, "done") // the answer that was streaming is complete
	closeA()
	evs = h.OpenStream(t, httpapitest.FormType, httpapitest.Form(finished, sid)).Rest(t)
	httpapitest.CheckCompat(t, evs)
	if got := httpapitest.StreamText(evs); got != strings.Repeat("tick ", 4) {
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

	for text, want := range map[string]int{first: 1, running: 1, finished: 1, again: 2} {
		if got := h.timesSent(text); got != want {
			t.Errorf("the model was asked about %q %d times, want %d", text, got, want)
		}
	}
	_, evs = h.ChatStream(t, "sebastian", "", httpapitest.JSONBody(map[string]any{"message": "[[recall]]", "session_id": sid}))
	want := "HISTORY: " + strings.Join([]string{first, running, finished, again, again, "[[recall]]"}, " | ")
	if got := httpapitest.StreamText(evs); got != want {
		t.Fatalf("the model's history:\n got %q\nwant %q", got, want)
	}
}

func TestConcurrentMessagesAnsweredInOrder(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	_, evs := h.ChatStream(t, "sebastian", httpapitest.FormType, httpapitest.Form("[[say hi]]", ""))
	sid := httpapitest.Str(evs[len(evs)-1], "session_id")
	q, closeQ := h.Attach(t, sid, "types=queued,turn_start")
	defer closeQ()

	slow := "[[slow 5 100]] a"
	s := h.OpenStream(t, httpapitest.FormType, httpapitest.Form(slow, sid))
	s.UpTo(t, "text")
	// Two more at once while the first runs: both wait and are answered.
	msgs := []string{"[[recall]] b", "[[recall]] c"}
	got := make([][]map[string]json.RawMessage, len(msgs))
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
		var evs []map[string]json.RawMessage
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
	var queued, started []string
	for len(started) < 4 {
		for _, e := range httpapitest.Until(t, q, "turn_start") {
			if m := httpapitest.Str(e, "message"); httpapitest.Str(e, "type") == "queued" {
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
	busy := h.NewSession(t)
	a, closeA := h.Attach(t, busy, "types=text,turn_start,done")
	defer closeA()
	if code, out := h.Call(t, "POST", "/api/claude/sessions/"+busy+"/messages", "sebastian", map[string]any{"message": "[[hang]]"}); code != http.StatusAccepted {
		t.Fatalf("busy message: %d %v", code, out)
	}
	httpapitest.Until(t, a, "turn_start")

	// A new conversation from the phone: the headers and a status come at
	// once while it waits for the slot.
	got := make(chan *http.Response, 1)
	go func() {
		req, _ := http.NewRequest("POST", h.url+"/api/claude/chat-stream", strings.NewReader(httpapitest.Form("[[say after the wait]]", "")))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("X-Notes-Person", "sebastian")
		req.Header.Set("Accept", "application/x-ndjson")
		req.Header.Set("Content-Type", httpapitest.FormType)
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
	s := httpapitest.ReadStream(resp)
	first, ok := s.Next(t)
	if !ok || httpapitest.Str(first, "type") != "status" || !strings.HasPrefix(httpapitest.Str(first, "message"), "Waiting for a free assistant process") {
		t.Fatalf("first line while waiting: %v", first)
	}
	// The slot frees when the other turn ends; the message then runs.
	if code, out := h.Call(t, "POST", "/api/claude/sessions/"+busy+"/interrupt", "sebastian", nil); code != 200 {
		t.Fatalf("interrupt: %d %v", code, out)
	}
	evs := s.Rest(t)
	httpapitest.CheckCompat(t, evs)
	if httpapitest.StreamText(evs) != "after the wait" {
		t.Fatalf("the waiting message: %v", evs)
	}
}
