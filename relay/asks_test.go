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

// checkColorQuestion checks that a question event carries the scripted
// model's [[ask]] question whole.
func checkColorQuestion(tb testing.TB, q map[string]json.RawMessage) {
	tb.Helper()
	var qs []struct {
		Question    string `json:"question"`
		Header      string `json:"header"`
		MultiSelect bool   `json:"multiSelect"`
		Options     []struct{ Label, Description string }
	}
	if err := json.Unmarshal(q["questions"], &qs); err != nil || len(qs) != 1 || qs[0].Question != "Which color?" ||
		qs[0].Header != "Color" || qs[0].MultiSelect || len(qs[0].Options) != 2 || qs[0].Options[1].Label != "Blue" || qs[0].Options[1].Description != "cool" {
		tb.Fatalf("questions %s", q["questions"])
	}
}

// answeredByOneOfTwo posts [[ask]] to session id, watched by clients a and
// b: both see the question with one request id, the session shows as
// waiting, the first answer ("Blue") wins, a second gets 409, and b sees
// that it was answered. It returns the turn's text, which holds what the
// model saw of the answer.
func answeredByOneOfTwo(tb testing.TB, h *harness, id string, a, b <-chan map[string]json.RawMessage) string {
	tb.Helper()
	if code, _ := h.Call(tb, "POST", "/api/claude/sessions/"+id+"/messages", "sebastian", map[string]any{"message": "[[ask]]"}); code != 202 {
		tb.Fatal("post", code)
	}
	reqID, q := waitAsk(tb, a, "question")
	reqB, _ := waitAsk(tb, b, "question")
	if reqID == "" || reqID != reqB {
		tb.Fatalf("request ids %q %q", reqID, reqB)
	}
	checkColorQuestion(tb, q)
	if _, out := h.Call(tb, "GET", "/api/claude/sessions", "sebastian", nil); !strings.Contains(httpapitest.JSONBody(out), `"state":"waiting"`) {
		tb.Fatalf("sessions list while waiting: %v", out)
	}
	code, out := h.Call(tb, "POST", "/api/claude/sessions/"+id+"/answer", "sebastian", map[string]any{"request_id": reqID, "answers": map[string]string{"Which color?": "Blue"}})
	if code != 200 {
		tb.Fatalf("answer: %d %v", code, out)
	}
	code, _ = h.Call(tb, "POST", "/api/claude/sessions/"+id+"/answer", "sebastian", map[string]any{"request_id": reqID, "answers": map[string]string{"Which color?": "Red"}})
	if code != http.StatusConflict {
		tb.Fatalf("second answer: %d, want 409", code)
	}
	_, answered := waitAsk(tb, b, "question_answered")
	if httpapitest.Str(answered, "outcome") != "answered" || !strings.Contains(string(answered["answers"]), "Blue") {
		tb.Fatalf("client B saw %v", answered)
	}
	text, last := turnText(tb, a)
	if last != "done" {
		tb.Fatalf("the turn ended with %s", last)
	}
	return text
}

// interruptPendingQuestion posts [[ask]] and interrupts the turn while the
// question waits: every client sees the question cancelled, and a late
// answer is refused.
func interruptPendingQuestion(tb testing.TB, h *harness, id string, a <-chan map[string]json.RawMessage) {
	tb.Helper()
	h.Call(tb, "POST", "/api/claude/sessions/"+id+"/messages", "sebastian", map[string]any{"message": "[[ask]]"})
	reqID, _ := waitAsk(tb, a, "question")
	if code, out := h.Call(tb, "POST", "/api/claude/sessions/"+id+"/interrupt", "sebastian", nil); code != 200 {
		tb.Fatalf("interrupt: %d %v", code, out)
	}
	evs := httpapitest.Until(tb, a, "done")
	var answered map[string]json.RawMessage
	for _, ev := range evs {
		if httpapitest.Str(ev, "type") == "question_answered" {
			answered = ev
			break
		}
	}
	if answered == nil || httpapitest.Str(answered, "outcome") != "cancelled" || httpapitest.Str(answered, "request_id") != reqID {
		tb.Fatalf("events after interrupt: %v", evs)
	}
	if code, _ := h.Call(tb, "POST", "/api/claude/sessions/"+id+"/answer", "sebastian", map[string]any{"request_id": reqID, "answers": map[string]string{"Which color?": "Red"}}); code != http.StatusConflict && code != http.StatusNotFound {
		tb.Fatalf("answer after interrupt: %d", code)
	}
}

// TestQuestionsAndPermissionsThroughCLI runs the CLI's side of questions
// and permission prompts on one real CLI process, step by step: the
// can_use_tool requests the CLI sends reach the clients with their whole
// input, and what the person answers (or that nobody could) reaches the
// model: a question answered by one of two clients, a multi-select
// answer, an interrupt while a question waits (the CLI takes the next turn
// after it), a denied write that does not happen, an allowed write that
// does, and one that is not asked again once allowed for the session.
func TestQuestionsAndPermissionsThroughCLI(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{askTools: []string{"Write"}})
	id := h.NewSession(t)
	vault := h.env.Vault("sebastian")
	write := func(name string) string {
		return `[[tool Write {"file_path":"` + vault + "/" + name + `","content":"x"}]]`
	}
	post := func(msg string) {
		if code, out := h.Call(t, "POST", "/api/claude/sessions/"+id+"/messages", "sebastian", map[string]any{"message": msg}); code != http.StatusAccepted {
			t.Fatalf("post %q: %d %v", msg, code, out)
		}
	}

	t.Run("no interactive client", func(t *testing.T) {
		// A compat client cannot answer: the question and the write are
		// denied, and the model is told so.
		_, evs := h.ChatStream(t, "sebastian", "", httpapitest.JSONBody(map[string]any{"message": "[[ask]]", "session_id": id}))
		httpapitest.CheckCompat(t, evs)
		if text := httpapitest.StreamText(evs); !strings.Contains(text, "Ask the person in plain text") {
			t.Fatalf("the model got %q", text)
		}
		_, evs = h.ChatStream(t, "sebastian", "", httpapitest.JSONBody(map[string]any{"message": write("x.md"), "session_id": id}))
		if text := httpapitest.StreamText(evs); !strings.Contains(text, "no client that can approve") {
			t.Fatalf("the model got %q", text)
		}
		if fileExists(vault + "/x.md") {
			t.Fatal("unapproved write happened")
		}
	})

	a, closeA := h.Attach(t, id, "types=question,question_answered,permission,permission_answered,text,done")
	defer closeA()
	b, closeB := h.Attach(t, id, "types=question,question_answered,done")
	defer closeB()
	t.Run("question answered by one of two clients", func(t *testing.T) {
		if text := answeredByOneOfTwo(t, h, id, a, b); !strings.Contains(text, `"Which color?"="Blue"`) {
			t.Fatalf("the model did not receive the answer: %q", text)
		}
		httpapitest.Until(t, b, "done")
	})
	t.Run("multi-select", func(t *testing.T) {
		post("[[ask-multi]]")
		reqID, _ := waitAsk(t, a, "question")
		if code, out := h.Call(t, "POST", "/api/claude/sessions/"+id+"/answer", "sebastian", map[string]any{"request_id": reqID, "answers": map[string]string{"Which toppings?": "Cheese, Basil"}}); code != 200 {
			t.Fatalf("answer: %d %v", code, out)
		}
		if text, _ := turnText(t, a); !strings.Contains(text, `"Which toppings?"="Cheese, Basil"`) {
			t.Fatalf("the model got %q", text)
		}
		httpapitest.Until(t, b, "done")
	})
	t.Run("interrupt while a question waits", func(t *testing.T) {
		interruptPendingQuestion(t, h, id, a)
		httpapitest.Until(t, b, "done")
	})
	closeB()

	t.Run("permission denied with a message", func(t *testing.T) {
		post(write("a.md"))
		reqID, p := waitAsk(t, a, "permission")
		if httpapitest.Str(p, "tool") != "Write" || !strings.Contains(string(p["input"]), "a.md") || httpapitest.Str(p, "reason") == "" {
			t.Fatalf("permission event %v", p)
		}
		if code, out := h.Call(t, "POST", "/api/claude/sessions/"+id+"/permission", "sebastian", map[string]any{"request_id": reqID, "behavior": "deny", "message": "not that file"}); code != 200 {
			t.Fatalf("deny: %d %v", code, out)
		}
		if text, _ := turnText(t, a); !strings.Contains(text, "not that file") {
			t.Fatalf("the model got %q", text)
		}
		if fileExists(vault + "/a.md") {
			t.Fatal("denied write happened")
		}
	})
	t.Run("permission allowed and remembered", func(t *testing.T) {
		post(write("b.md"))
		reqID, _ := waitAsk(t, a, "permission")
		if code, out := h.Call(t, "POST", "/api/claude/sessions/"+id+"/permission", "sebastian", map[string]any{"request_id": reqID, "behavior": "allow", "remember": true}); code != 200 {
			t.Fatalf("allow: %d %v", code, out)
		}
		turnText(t, a)
		if !fileExists(vault + "/b.md") {
			t.Fatal("allowed write did not happen")
		}
		post(write("c.md"))
		for _, ev := range httpapitest.Until(t, a, "done") {
			if httpapitest.Str(ev, "type") == "permission" {
				t.Fatal("asked again after remember")
			}
		}
		if !fileExists(vault + "/c.md") {
			t.Fatal("remembered write did not happen")
		}
	})
}

// The chat's side of questions, on the fake CLI: both clients see the
// question and its shape, the session shows as waiting, the first answer
// wins and every client sees it, and the answers go to the CLI in the
// tool's input; a multi-select question and a free-text answer go the
// same way.
func TestQuestionAnsweredByOneOfTwoClients(t *testing.T) {
	t.Parallel()
	h := newFakeHarness(t, harnessOpts{})
	id := h.NewSession(t)
	a, closeA := h.Attach(t, id, "types=question,question_answered,text,done")
	defer closeA()
	b, closeB := h.Attach(t, id, "types=question,question_answered,done")
	defer closeB()
	if text := answeredByOneOfTwo(t, h, id, a, b); text != `"Which color?"="Blue"` {
		t.Fatalf("the CLI got %q", text)
	}
	for _, tc := range []struct{ msg, question, answer string }{
		{"[[ask-multi]]", "Which toppings?", "Cheese, Basil"},
		{"[[ask]]", "Which color?", "A deep forest green"},
	} {
		h.Call(t, "POST", "/api/claude/sessions/"+id+"/messages", "sebastian", map[string]any{"message": tc.msg})
		reqID, q := waitAsk(t, a, "question")
		if multi := strings.Contains(string(q["questions"]), `"multiSelect":true`); multi != (tc.msg == "[[ask-multi]]") {
			t.Fatalf("questions %s", q["questions"])
		}
		if code, out := h.Call(t, "POST", "/api/claude/sessions/"+id+"/answer", "sebastian", map[string]any{"request_id": reqID, "answers": map[string]string{tc.question: tc.answer}}); code != 200 {
			t.Fatalf("answer: %d %v", code, out)
		}
		text, _ := turnText(t, a)
		if want := `"` + tc.question + `"="` + tc.answer + `"`; text != want {
			t.Fatalf("the CLI got %q, want %q", text, want)
		}
	}
}

func TestQuestionWithoutInteractiveClientIsDenied(t *testing.T) {
	t.Parallel()
	h := newFakeHarness(t, harnessOpts{})
	// A compat client cannot answer: the tool is denied and the turn ends.
	_, evs := h.ChatStream(t, "sebastian", "", httpapitest.JSONBody(map[string]any{"message": "[[ask]]"}))
	httpapitest.CheckCompat(t, evs)
	if text := httpapitest.StreamText(evs); !strings.Contains(text, "Ask the person in plain text") {
		t.Fatalf("the CLI got %q", text)
	}
}

func TestQuestionTimeoutAndInterrupt(t *testing.T) {
	t.Parallel()
	h := newFakeHarness(t, harnessOpts{askTimeout: 100 * time.Millisecond})
	id := h.NewSession(t)
	a, closeA := h.Attach(t, id, "types=question_answered")
	// interactive:true on the compat stream makes it a client that can answer.
	_, evs := h.ChatStream(t, "sebastian", "", httpapitest.JSONBody(map[string]any{"message": "[[ask]]", "session_id": id, "interactive": true}))
	httpapitest.CheckCompat(t, evs)
	if text := httpapitest.StreamText(evs); !strings.Contains(text, "did not answer in time") {
		t.Fatalf("after timeout the CLI got %q", text)
	}
	if _, ev := waitAsk(t, a, "question_answered"); httpapitest.Str(ev, "outcome") != "timeout" {
		t.Fatalf("after timeout: %v", ev)
	}
	closeA()

	h2 := newFakeHarness(t, harnessOpts{})
	id = h2.NewSession(t)
	b, closeB := h2.Attach(t, id, "types=question,question_answered,status,done,error")
	defer closeB()
	// The question would wait for its 10-minute timeout.
	interruptPendingQuestion(t, h2, id, b)
	h2.assertUsable(t, id)
}

func TestReattachWhileQuestionPending(t *testing.T) {
	t.Parallel()
	h := newFakeHarness(t, harnessOpts{})
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
		t.Fatalf("the CLI got %q", text)
	}
}

// The chat's side of permission prompts, on the fake CLI: the prompt names
// the tool, its input and a reason; a denial's message goes to the CLI;
// an allowed tool runs; allowed with remember, the tool is not asked for
// again in the session.
func TestPermissionAllowDenyRemember(t *testing.T) {
	t.Parallel()
	h := newFakeHarness(t, harnessOpts{askTools: []string{"Write"}})
	id := h.NewSession(t)
	a, closeA := h.Attach(t, id, "types=permission,permission_answered,text,done")
	defer closeA()
	write := func(name string) string {
		return `[[tool Write {"file_path":"/vault/` + name + `","content":"x"}]]`
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
	if _, ev := waitAsk(t, a, "permission_answered"); httpapitest.Str(ev, "behavior") != "deny" {
		t.Fatalf("answered event %v", ev)
	}
	if text, _ := turnText(t, a); text != "not that file" {
		t.Fatalf("the CLI got %q", text)
	}

	// Allow once, remembering: the next Write runs without a prompt.
	h.Call(t, "POST", "/api/claude/sessions/"+id+"/messages", "sebastian", map[string]any{"message": write("b.md")})
	reqID, _ = waitAsk(t, a, "permission")
	if code, out := h.Call(t, "POST", "/api/claude/sessions/"+id+"/permission", "sebastian", map[string]any{"request_id": reqID, "behavior": "allow", "remember": true}); code != 200 {
		t.Fatalf("allow: %d %v", code, out)
	}
	if text, _ := turnText(t, a); text != "the tool ran" {
		t.Fatalf("allowed write: the CLI got %q", text)
	}
	h.Call(t, "POST", "/api/claude/sessions/"+id+"/messages", "sebastian", map[string]any{"message": write("c.md")})
	evs := httpapitest.Until(t, a, "done")
	for _, ev := range evs {
		if httpapitest.Str(ev, "type") == "permission" {
			t.Fatal("asked again after remember")
		}
	}
	if text := httpapitest.StreamText(evs); text != "the tool ran" {
		t.Fatalf("remembered write: the CLI got %q", text)
	}
}

func TestPermissionWithoutClientAndTimeout(t *testing.T) {
	t.Parallel()
	h := newFakeHarness(t, harnessOpts{askTools: []string{"Write"}, askTimeout: 100 * time.Millisecond})
	msg := `[[tool Write {"file_path":"/vault/x.md","content":"x"}]]`
	_, evs := h.ChatStream(t, "sebastian", "", httpapitest.JSONBody(map[string]any{"message": msg}))
	if text := httpapitest.StreamText(evs); !strings.Contains(text, "no client that can approve") {
		t.Fatalf("without a client the CLI got %q", text)
	}
	_, evs = h.ChatStream(t, "sebastian", "", httpapitest.JSONBody(map[string]any{"message": msg, "interactive": true}))
	if text := httpapitest.StreamText(evs); !strings.Contains(text, "did not approve") {
		t.Fatalf("after timeout the CLI got %q", text)
	}
}
