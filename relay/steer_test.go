package relay_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/majorhq/major/httpapi/httpapitest"
)

// compatHistory is session id's compat history as {role, content} pairs.
func (h *harness) compatHistory(tb testing.TB, id string) []string {
	tb.Helper()
	resp := h.Request(tb, "GET", "/api/claude/history?session_id="+id, "sebastian", "", "")
	defer resp.Body.Close()
	var hist struct {
		Messages []struct{ Role, Content string } `json:"messages"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&hist); err != nil {
		tb.Fatal(err)
	}
	var out []string
	for _, m := range hist.Messages {
		out = append(out, m.Role+": "+m.Content)
	}
	return out
}

// A message posted with steer while a turn runs goes into that turn, on
// the fake CLI: 202 says steered, the events show it where it went in
// (steered, with the answer's queue_id), no turn of its own starts, the
// turn ends once, and both histories show it: the rich one among the
// answer's parts where it went in, the compat one as a user message
// before the turn's answer. Form and JSON bodies both take steer; with no
// turn running it is an ordinary message.
func TestSteerGoesIntoTheRunningTurn(t *testing.T) {
	t.Parallel()
	h := newFakeHarness(t, harnessOpts{})
	id := h.NewSession(t)
	events, closeEvents := h.Attach(t, id, "types=turn_start,steered,text,done,error,refused")
	defer closeEvents()
	if code, out := h.Call(t, "POST", "/api/claude/sessions/"+id+"/messages", "sebastian", map[string]any{"message": "first"}); code != http.StatusAccepted {
		t.Fatalf("first message: %d %v", code, out)
	}
	f := h.fake(t, id)
	f.Stream("before ")
	resp := h.Request(t, "POST", "/api/claude/sessions/"+id+"/messages", "sebastian", "application/x-www-form-urlencoded", "message=also+this&steer=true")
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || out["steered"] != true || out["queued"] != false {
		t.Fatalf("steer: %d %v", resp.StatusCode, out)
	}
	steered := httpapitest.Until(t, events, "steered")
	last := steered[len(steered)-1]
	if httpapitest.Str(last, "message") != "also this" || httpapitest.Str(last, "queue_id") != out["queue_id"] {
		t.Fatalf("steered event %v, answer %v", last, out)
	}
	f.Reply("after")
	rest := httpapitest.Until(t, events, "done")
	all := append(steered, rest...)
	types := ""
	for _, ev := range all {
		types += httpapitest.Str(ev, "type") + " "
	}
	if types != "turn_start text steered text done " {
		t.Fatalf("events: %s", types)
	}
	if got := f.Sent(); !slices.Equal(got, []string{"first"}) {
		t.Fatalf("turns started for %q; the steered message must not start one", got)
	}
	if got := f.Steered(); !slices.Equal(got, []string{"also this"}) {
		t.Fatalf("steered into the turn: %q", got)
	}
	if got, want := h.compatHistory(t, id), []string{"user: first", "user: also this", "assistant: before after"}; !slices.Equal(got, want) {
		t.Fatalf("compat history %q, want %q", got, want)
	}
	rich := h.richHistory(t, id)
	if len(rich) != 2 || rich[1].Content != "before after" {
		t.Fatalf("rich history %+v", rich)
	}
	var parts []string
	for _, p := range rich[1].Parts {
		parts = append(parts, p.Type+":"+p.Text)
	}
	if want := []string{"text:before ", "steered:also this", "text:after"}; !slices.Equal(parts, want) {
		t.Fatalf("answer parts %q, want %q", parts, want)
	}

	// No turn runs: steer is an ordinary message.
	code, out := h.Call(t, "POST", "/api/claude/sessions/"+id+"/messages", "sebastian", map[string]any{"message": "[[say alone]]", "steer": true})
	if code != http.StatusAccepted || out["steered"] != false {
		t.Fatalf("steer with no turn running: %d %v", code, out)
	}
	if ev := httpapitest.Until(t, events, "done"); !strings.Contains(httpapitest.Str(ev[len(ev)-2], "delta"), "alone") {
		t.Fatalf("the ordinary turn: %v", ev)
	}
	if code, out := h.Call(t, "POST", "/api/claude/sessions/"+id+"/messages", "sebastian", map[string]any{"message": "x", "steer": "yes"}); code != http.StatusBadRequest {
		t.Fatalf("steer that is not a boolean: %d %v", code, out)
	}
}

// A seed client's chat-stream with steer streams the running turn from
// the moment its message went in: the answer's text after it, then the
// turn's one done, in the seed's format.
func TestSteerOnChatStream(t *testing.T) {
	t.Parallel()
	h := newFakeHarness(t, harnessOpts{})
	id := h.NewSession(t)
	h.Call(t, "POST", "/api/claude/sessions/"+id+"/messages", "sebastian", map[string]any{"message": "first"})
	f := h.fake(t, id)
	f.Stream("before ")
	s := h.OpenStream(t, "", httpapitest.JSONBody(map[string]any{"message": "more", "session_id": id, "steer": true}))
	f.Reply("after")
	evs := s.Rest(t)
	httpapitest.CheckCompat(t, evs)
	if text := httpapitest.StreamText(evs); text != "after" {
		t.Fatalf("the steered stream's text %q, want the turn's from the message on", text)
	}
	if last := evs[len(evs)-1]; httpapitest.Str(last, "type") != "done" || httpapitest.Str(last, "session_id") != id {
		t.Fatalf("the stream ended with %v", last)
	}
}

// A message given to a turn that is interrupted before the message went
// in never runs: a refused event of kind turn_ended names it, its
// chat-stream ends with an error saying so, and no history shows it.
func TestSteerDroppedByAnInterrupt(t *testing.T) {
	t.Parallel()
	h := newFakeHarness(t, harnessOpts{})
	id := h.NewSession(t)
	events, closeEvents := h.Attach(t, id, "types=steered,refused,done")
	defer closeEvents()
	h.Call(t, "POST", "/api/claude/sessions/"+id+"/messages", "sebastian", map[string]any{"message": "first"})
	f := h.fake(t, id)
	// As the CLI does until its next model request.
	f.HoldSteers = true
	s := h.OpenStream(t, "", httpapitest.JSONBody(map[string]any{"message": "wait, no", "session_id": id, "steer": true}))
	if code, out := h.Call(t, "POST", "/api/claude/sessions/"+id+"/interrupt", "sebastian", nil); code != http.StatusOK {
		t.Fatalf("interrupt: %d %v", code, out)
	}
	evs := s.Rest(t)
	last := evs[len(evs)-1]
	if httpapitest.Str(last, "type") != "error" || !strings.Contains(httpapitest.Str(last, "message"), "before your message reached the assistant") {
		t.Fatalf("the steered stream ended with %v", last)
	}
	got := httpapitest.Until(t, events, "done")
	if len(got) != 2 || httpapitest.Str(got[0], "type") != "refused" || httpapitest.Str(got[0], "kind") != "turn_ended" ||
		httpapitest.Str(got[0], "message") != "wait, no" {
		t.Fatalf("events %v", got)
	}
	if hist := h.compatHistory(t, id); slices.ContainsFunc(hist, func(m string) bool { return strings.Contains(m, "wait, no") }) {
		t.Fatalf("the dropped message is in the history: %q", hist)
	}
}

// Through the real CLI, in its sandbox: a seed client's chat-stream with
// steer, sent while a turn of tool calls runs, streams that turn from the
// moment its message went in (the model heard it within the turn) to the
// turn's one done; the first message's stream ends with the same done,
// and the events show one turn with the message steered into it.
func TestSteerThroughCLI(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	id := h.NewSession(t)
	events, closeEvents := h.Attach(t, id, "types=turn_start,steered,tool,done,error")
	defer closeEvents()
	first := h.OpenStream(t, "", httpapitest.JSONBody(map[string]any{"message": "[[steps 3 2000]]", "session_id": id}))
	httpapitest.Until(t, events, "tool")
	steer := h.OpenStream(t, "", httpapitest.JSONBody(map[string]any{"message": "also bananas", "session_id": id, "steer": true}))
	steered := steer.Rest(t)
	httpapitest.CheckCompat(t, steered)
	if text := httpapitest.StreamText(steered); !strings.HasPrefix(text, "STEPS DONE; heard: ") || !strings.Contains(text, "also bananas") {
		t.Fatalf("the steered stream's text %q", text)
	}
	if last := steered[len(steered)-1]; httpapitest.Str(last, "type") != "done" {
		t.Fatalf("the steered stream ended with %v", last)
	}
	firstEvs := first.Rest(t)
	if last := firstEvs[len(firstEvs)-1]; httpapitest.Str(last, "type") != "done" || httpapitest.StreamText(firstEvs) != httpapitest.StreamText(steered) {
		t.Fatalf("the first stream: %v", firstEvs)
	}
	var types []string
	for _, ev := range httpapitest.Until(t, events, "done") {
		if typ := httpapitest.Str(ev, "type"); typ != "tool" {
			types = append(types, typ)
		}
	}
	if !slices.Equal(types, []string{"steered", "done"}) {
		t.Fatalf("events after the first tool call: %q, want the steered message and the turn's one end", types)
	}
}
