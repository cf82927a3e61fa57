package relay_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/majorhq/major/httpapi/httpapitest"
)

// question waits for a question event and returns its request id.
func waitAsk(tb testing.TB, ch <-chan map[string]json.RawMessage, typ string) (string, map[string]json.RawMessage) {
	tb.Helper()
	evs := httpapitest.Until(tb, ch, typ)
	ev := evs[len(evs)-1]
	return httpapitest.Str(ev, "request_id"), ev
}

func turnText(tb testing.TB, ch <-chan map[string]json.RawMessage) (string, string) {
	tb.Helper()
	var sb strings.Builder
	evs := httpapitest.Until(tb, ch, "done")
	for _, ev := range evs {
		if httpapitest.Str(ev, "type") == "text" {
			sb.WriteString(httpapitest.Str(ev, "delta"))
		}
	}
	return sb.String(), httpapitest.Str(evs[len(evs)-1], "type")
}

func TestQuestionAnsweredByOneOfTwoClients(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	id := h.NewSession(t)
	a, closeA := h.Attach(t, id, "types=question,question_answered,text,done")
	defer closeA()
	b, closeB := h.Attach(t, id, "types=question,question_answered,done")
	defer closeB()
	if code, _ := h.Call(t, "POST", "/api/claude/sessions/"+id+"/messages", "sebastian", map[string]any{"message": "[[ask]]"}); code != 202 {
		t.Fatal("post", code)
	}
	reqID, q := waitAsk(t, a, "question")
	reqB, _ := waitAsk(t, b, "question")
	if reqID == "" || reqID != reqB {
		t.Fatalf("request ids %q %q", reqID, reqB)
	}
	var qs []struct {
		Question    string `json:"question"`
		Header      string `json:"header"`
		MultiSelect bool   `json:"multiSelect"`
		Options     []struct{ Label, Description string }
	}
	if err := json.Unmarshal(q["questions"], &qs); err != nil || len(qs) != 1 || qs[0].Question != "Which color?" ||
		qs[0].Header != "Color" || len(qs[0].Options) != 2 || qs[0].Options[1].Label != "Blue" || qs[0].Options[1].Description != "cool" {
		t.Fatalf("questions %s", q["questions"])
	}
	if _, out := h.Call(t, "GET", "/api/claude/sessions", "sebastian", nil); !strings.Contains(httpapitest.JSONBody(out), `"state":"waiting"`) {
		t.Fatalf("sessions list while waiting: %v", out)
	}
	code, out := h.Call(t, "POST", "/api/claude/sessions/"+id+"/answer", "sebastian", map[string]any{"request_id": reqID, "answers": map[string]string{"Which color?": "Blue"}})
	if code != 200 {
		t.Fatalf("answer: %d %v", code, out)
	}
	code, _ = h.Call(t, "POST", "/api/claude/sessions/"+id+"/answer", "sebastian", map[string]any{"request_id": reqID, "answers": map[string]string{"Which color?": "Red"}})
	if code != http.StatusConflict {
		t.Fatalf("second answer: %d, want 409", code)
	}
	_, answered := waitAsk(t, b, "question_answered")
	if httpapitest.Str(answered, "outcome") != "answered" || !strings.Contains(string(answered["answers"]), "Blue") {
		t.Fatalf("client B saw %v", answered)
	}
	text, last := turnText(t, a)
	if last != "done" || !strings.Contains(text, `"Which color?"="Blue"`) {
		t.Fatalf("the model did not receive the answer: %q", text)
	}
}

func TestQuestionMultiSelectAndFreeText(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	id := h.NewSession(t)
	a, closeA := h.Attach(t, id, "types=question,text,done")
	defer closeA()
	for _, tc := range []struct{ msg, question, answer string }{
		{"[[ask-multi]]", "Which toppings?", "Cheese, Basil"},
		{"[[ask]]", "Which color?", "A deep forest green"},
	} {
		h.Call(t, "POST", "/api/claude/sessions/"+id+"/messages", "sebastian", map[string]any{"message": tc.msg})
		reqID, _ := waitAsk(t, a, "question")
		if code, out := h.Call(t, "POST", "/api/claude/sessions/"+id+"/answer", "sebastian", map[string]any{"request_id": reqID, "answers": map[string]string{tc.question: tc.answer}}); code != 200 {
			t.Fatalf("answer: %d %v", code, out)
		}
		text, _ := turnText(t, a)
		if want := `"` + tc.question + `"="` + tc.answer + `"`; !strings.Contains(text, want) {
			t.Fatalf("model got %q, want it to contain %q", text, want)
		}
	}
}

func TestQuestionWithoutInteractiveClientIsDenied(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	// A compat client cannot answer: the tool is denied and the turn ends.
	_, evs := h.ChatStream(t, "sebastian", "", httpapitest.JSONBody(map[string]any{"message": "[[ask]]"}))
	httpapitest.CheckCompat(t, evs)
	if text := httpapitest.StreamText(evs); !strings.Contains(text, "Ask the person in plain text") {
		t.Fatalf("model got %q", text)
	}
}

func TestQuestionTimeoutAndInterrupt(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{askTimeout: 500 * time.Millisecond})
	id := h.NewSession(t)
	// interactive:true on the compat stream makes it a client that can answer.
	_, evs := h.ChatStream(t, "sebastian", "", httpapitest.JSONBody(map[string]any{"message": "[[ask]]", "session_id": id, "interactive": true}))
	httpapitest.CheckCompat(t, evs)
	if text := httpapitest.StreamText(evs); !strings.Contains(text, "did not answer in time") {
		t.Fatalf("after timeout the model got %q", text)
	}

	h2 := newHarness(t, harnessOpts{})
	id = h2.NewSession(t)
	a, closeA := h2.Attach(t, id, "types=question,question_answered,status,done,error")
	defer closeA()
	h2.Call(t, "POST", "/api/claude/sessions/"+id+"/messages", "sebastian", map[string]any{"message": "[[ask]]"})
	reqID, _ := waitAsk(t, a, "question")
	// The question would wait for its 10-minute timeout; Until gives up
	// after one.
	if code, out := h2.Call(t, "POST", "/api/claude/sessions/"+id+"/interrupt", "sebastian", nil); code != 200 {
		t.Fatalf("interrupt: %d %v", code, out)
	}
	evs = httpapitest.Until(t, a, "done")
	if httpapitest.Str(evs[0], "type") != "question_answered" || httpapitest.Str(evs[0], "outcome") != "cancelled" || httpapitest.Str(evs[0], "request_id") != reqID {
		t.Fatalf("events after interrupt: %v", evs)
	}
	if code, _ := h2.Call(t, "POST", "/api/claude/sessions/"+id+"/answer", "sebastian", map[string]any{"request_id": reqID, "answers": map[string]string{"Which color?": "Red"}}); code != http.StatusConflict && code != http.StatusNotFound {
		t.Fatalf("answer after interrupt: %d", code)
	}
	h2.assertUsable(t, id)
}

func TestReattachWhileQuestionPending(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	id := h.NewSession(t)
	a, closeA := h.Attach(t, id, "")
	h.Call(t, "POST", "/api/claude/sessions/"+id+"/messages", "sebastian", map[string]any{"message": "[[ask]]"})
	reqID, q := waitAsk(t, a, "question")
	seq := seqOf(t, q)
	closeA()
	// The phone comes back with the question's own seq as its last seen.
	b, closeB := h.Attach(t, id, "after="+httpapitest.JSONBody(seq))
	defer closeB()
	again, ev := waitAsk(t, b, "question")
	if again != reqID || seqOf(t, ev) != seq {
		t.Fatalf("re-attached client saw %v", ev)
	}
	h.Call(t, "POST", "/api/claude/sessions/"+id+"/answer", "sebastian", map[string]any{"request_id": reqID, "answers": map[string]string{"Which color?": "Red"}})
	text, _ := turnText(t, b)
	if !strings.Contains(text, `="Red"`) {
		t.Fatalf("model got %q", text)
	}
}

func TestPermissionAllowDenyRemember(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{askTools: []string{"Write"}})
	id := h.NewSession(t)
	a, closeA := h.Attach(t, id, "types=permission,permission_answered,text,done")
	defer closeA()
	write := func(name string) string {
		return `[[tool Write {"file_path":"` + h.env.Vault("sebastian") + "/" + name + `","content":"x"}]]`
	}

	// Deny with a message.
	h.Call(t, "POST", "/api/claude/sessions/"+id+"/messages", "sebastian", map[string]any{"message": write("a.md")})
	reqID, p := waitAsk(t, a, "permission")
	if httpapitest.Str(p, "tool") != "Write" || !strings.Contains(string(p["input"]), "a.md") || httpapitest.Str(p, "reason") == "" {
		t.Fatalf("permission event %v", p)
	}
	if code, out := h.Call(t, "POST", "/api/claude/sessions/"+id+"/permission", "sebastian", map[string]any{"request_id": reqID, "behavior": "deny", "message": "not that file"}); code != 200 {
		t.Fatalf("deny: %d %v", code, out)
	}
	if text, _ := turnText(t, a); !strings.Contains(text, "not that file") {
		t.Fatalf("model got %q", text)
	}
	if fileExists(h.env.Vault("sebastian") + "/a.md") {
		t.Fatal("denied write happened")
	}

	// Allow once, remembering: the next Write runs without a prompt.
	h.Call(t, "POST", "/api/claude/sessions/"+id+"/messages", "sebastian", map[string]any{"message": write("b.md")})
	reqID, _ = waitAsk(t, a, "permission")
	if code, out := h.Call(t, "POST", "/api/claude/sessions/"+id+"/permission", "sebastian", map[string]any{"request_id": reqID, "behavior": "allow", "remember": true}); code != 200 {
		t.Fatalf("allow: %d %v", code, out)
	}
	turnText(t, a)
	if !fileExists(h.env.Vault("sebastian") + "/b.md") {
		t.Fatal("allowed write did not happen")
	}
	h.Call(t, "POST", "/api/claude/sessions/"+id+"/messages", "sebastian", map[string]any{"message": write("c.md")})
	evs := httpapitest.Until(t, a, "done")
	for _, ev := range evs {
		if httpapitest.Str(ev, "type") == "permission" {
			t.Fatal("asked again after remember")
		}
	}
	if !fileExists(h.env.Vault("sebastian") + "/c.md") {
		t.Fatal("remembered write did not happen")
	}
}

func TestPermissionWithoutClientAndTimeout(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{askTools: []string{"Write"}, askTimeout: 400 * time.Millisecond})
	msg := `[[tool Write {"file_path":"` + h.env.Vault("sebastian") + `/x.md","content":"x"}]]`
	_, evs := h.ChatStream(t, "sebastian", "", httpapitest.JSONBody(map[string]any{"message": msg}))
	if text := httpapitest.StreamText(evs); !strings.Contains(text, "no client that can approve") {
		t.Fatalf("without a client the model got %q", text)
	}
	_, evs = h.ChatStream(t, "sebastian", "", httpapitest.JSONBody(map[string]any{"message": msg, "interactive": true}))
	if text := httpapitest.StreamText(evs); !strings.Contains(text, "did not approve") {
		t.Fatalf("after timeout the model got %q", text)
	}
	if fileExists(h.env.Vault("sebastian") + "/x.md") {
		t.Fatal("unapproved write happened")
	}
}
