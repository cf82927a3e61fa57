package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/majorhq/major/httpapi/httpapitest"
	"github.com/majorhq/major/relay"
	"github.com/majorhq/major/relay/relaytest"
	"github.com/majorhq/major/supervisor"
)

func TestSessionControlsValidateTheirInput(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{reply: scriptedReply})
	id := h.NewSession(t)
	base := "/api/claude/sessions/" + id
	checkStatuses(t, h, []statusCase{
		{"model", "POST", base + "/model", "sebastian", "", `{"model":"claude-sonnet-4-5"}`, 200},
		{"model as a form", "POST", base + "/model", "sebastian", "application/x-www-form-urlencoded", "model=sonnet", 200},
		{"no model", "POST", base + "/model", "sebastian", "", `{}`, 400},
		{"model with a flag in it", "POST", base + "/model", "sebastian", "", `{"model":"--dangerously-skip-permissions"}`, 400},
		{"model with spaces", "POST", base + "/model", "sebastian", "", `{"model":"a b"}`, 400},
		{"model: bad JSON", "POST", base + "/model", "sebastian", "", `{"model":`, 400},
		{"model: unknown session", "POST", "/api/claude/sessions/nope/model", "sebastian", "", `{"model":"sonnet"}`, 404},
		{"model: another person's session", "POST", base + "/model", "petra", "", `{"model":"sonnet"}`, 404},
		{"mode default", "POST", base + "/permission-mode", "sebastian", "", `{"mode":"default"}`, 200},
		{"mode plan", "POST", base + "/permission-mode", "sebastian", "", `{"mode":"plan"}`, 200},
		{"mode acceptEdits", "POST", base + "/permission-mode", "sebastian", "", `{"mode":"acceptEdits"}`, 200},
		{"mode bypassPermissions", "POST", base + "/permission-mode", "sebastian", "", `{"mode":"bypassPermissions"}`, 400},
		{"mode dontAsk", "POST", base + "/permission-mode", "sebastian", "", `{"mode":"dontAsk"}`, 400},
		{"mode auto", "POST", base + "/permission-mode", "sebastian", "", `{"mode":"auto"}`, 400},
		{"mode in other case", "POST", base + "/permission-mode", "sebastian", "", `{"mode":"PLAN"}`, 400},
		{"no mode", "POST", base + "/permission-mode", "sebastian", "", `{}`, 400},
		{"mode: another person's session", "POST", base + "/permission-mode", "petra", "", `{"mode":"plan"}`, 404},
		{"thinking", "POST", base + "/thinking", "sebastian", "", `{"max_thinking_tokens":4000}`, 200},
		{"thinking default", "POST", base + "/thinking", "sebastian", "", `{"max_thinking_tokens":0}`, 200},
		{"thinking negative", "POST", base + "/thinking", "sebastian", "", `{"max_thinking_tokens":-1}`, 400},
		{"thinking missing", "POST", base + "/thinking", "sebastian", "", `{}`, 400},
		{"thinking not a number", "POST", base + "/thinking", "sebastian", "", `{"max_thinking_tokens":"lots"}`, 400},
		{"effort", "POST", base + "/thinking", "sebastian", "", `{"effort":"high"}`, 200},
		{"effort as a form", "POST", base + "/thinking", "sebastian", "application/x-www-form-urlencoded", "effort=low", 200},
		{"effort unknown", "POST", base + "/thinking", "sebastian", "", `{"effort":"extreme"}`, 400},
		{"effort empty", "POST", base + "/thinking", "sebastian", "", `{"effort":""}`, 400},
		{"get", "GET", base, "sebastian", "", "", 200},
		{"get: another person's session", "GET", base, "petra", "", "", 404},
		{"fork: unknown session", "POST", "/api/claude/sessions/nope/fork", "sebastian", "", "", 404},
		{"fork: another person's session", "POST", base + "/fork", "petra", "", "", 404},
		{"rewind: no message", "POST", base + "/rewind", "sebastian", "", `{}`, 400},
		{"rewind: not a message id", "POST", base + "/rewind", "sebastian", "", `{"message_id":"turn-1-assistant"}`, 400},
		{"rewind: no such message", "POST", base + "/rewind", "sebastian", "", `{"message_id":"turn-9-user"}`, 404},
		{"rewind: nothing to rewind", "POST", base + "/rewind", "sebastian", "", `{"message_id":"turn-1-user","files":false}`, 400},
		{"rewind: another person's session", "POST", base + "/rewind", "petra", "", `{"message_id":"turn-1-user"}`, 404},
		{"usage", "GET", "/api/claude/usage?days=3", "sebastian", "", "", 200},
		{"usage: days not a number", "GET", "/api/claude/usage?days=x", "sebastian", "", "", 400},
		{"usage: too many days", "GET", "/api/claude/usage?days=9999", "sebastian", "", "", 400},
	})
}

// statusCase is a request and the status it must get.
type statusCase struct {
	name, method, path, person, ctype, body string
	want                                    int
}

// checkStatuses sends each request in turn (each sees what the ones
// before it did) and checks its status.
func checkStatuses(t *testing.T, h *harness, cases []statusCase) {
	t.Helper()
	for _, tc := range cases {
		resp := h.Request(t, tc.method, tc.path, tc.person, tc.ctype, tc.body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, resp.StatusCode, tc.want)
		}
	}
}

func TestSettingsShowInTheSessionAndReachTheCLI(t *testing.T) {
	t.Parallel()
	refuse := false
	h := newHarness(t, harnessOpts{reply: scriptedReply, setup: func(f *relaytest.CLI) {
		f.ConfigureFunc = func(_ context.Context, set supervisor.Settings) error {
			if refuse {
				return &supervisor.ControlError{Subtype: "set_model", Message: "no such model"}
			}
			return nil
		}
	}})
	id := h.NewSession(t)
	events, detach := h.Attach(t, id, "after=0")
	defer detach()
	base := "/api/claude/sessions/" + id
	for _, call := range []struct{ path, body string }{
		{"/model", `{"model":"claude-sonnet-4-5"}`},
		{"/permission-mode", `{"mode":"plan"}`},
		{"/thinking", `{"max_thinking_tokens":2048}`},
		{"/thinking", `{"effort":"xhigh"}`},
	} {
		if code, out := h.Call(t, "POST", base+call.path, "sebastian", json.RawMessage(call.body)); code != 200 {
			t.Fatalf("%s: %d %v", call.path, code, out)
		}
	}
	want := supervisor.Settings{Model: "claude-sonnet-4-5", PermissionMode: "plan", MaxThinkingTokens: 2048, Effort: "xhigh"}
	if got := h.fakes.CLI(id).Settings(); got != want {
		t.Fatalf("the CLI got %+v, want %+v", got, want)
	}
	_, info := h.Call(t, "GET", base, "sebastian", nil)
	if info["model"] != "claude-sonnet-4-5" || info["permission_mode"] != "plan" || info["max_thinking_tokens"] != float64(2048) {
		t.Fatalf("session shows %v", info)
	}
	_, list := h.Call(t, "GET", "/api/claude/sessions", "sebastian", nil)
	if s := list["sessions"].([]any)[0].(map[string]any); s["model"] != "claude-sonnet-4-5" {
		t.Fatalf("list shows %v", s)
	}
	var last httpapitest.Event
	for range 4 {
		last = httpapitest.Until(t, events, "settings")[0]
	}
	if httpapitest.Str(last, "model") != "claude-sonnet-4-5" || httpapitest.Str(last, "permission_mode") != "plan" {
		t.Fatalf("settings event %v", last)
	}

	refuse = true
	code, out := h.Call(t, "POST", base+"/model", "sebastian", json.RawMessage(`{"model":"claude-nothing"}`))
	if code != http.StatusUnprocessableEntity || strings.Contains(out["error"].(string), "no such model") {
		t.Fatalf("refused model: %d %v", code, out)
	}
	if got := h.fakes.CLI(id).Settings(); got != want {
		t.Fatalf("a refused model changed the settings: %+v", got)
	}
}

func TestOverBudgetMessagesAreRefusedBeforeTheModel(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{reply: scriptedReply, usage: &supervisor.Usage{CostUSD: 0.6, InputTokens: 100, NumTurns: 1},
		limits: relay.Limits{SessionUSD: 1, PersonDayUSD: 1.5}})
	id := h.NewSession(t)
	events, detach := h.Attach(t, id, "after=0")
	defer detach()
	msg := func(text string) (int, map[string]any) {
		return h.Call(t, "POST", "/api/claude/sessions/"+id+"/messages", "sebastian", map[string]any{"message": text})
	}
	for _, text := range []string{"one", "two"} {
		if code, out := msg(text); code != http.StatusAccepted {
			t.Fatalf("%s: %d %v", text, code, out)
		}
		done := httpapitest.Until(t, events, "done")
		if d := done[len(done)-1]; string(d["cost_usd"]) != "0.6" || d["usage"] == nil || string(d["session_cost_usd"]) == "" {
			t.Fatalf("done %v", d)
		}
	}
	// 1.2 spent of 1: refused on every path, and the fake never sees it.
	code, out := msg("three")
	if code != http.StatusPaymentRequired || !strings.Contains(out["error"].(string), "budget of $1.00") {
		t.Fatalf("over budget: %d %v", code, out)
	}
	if refused := httpapitest.Until(t, events, "refused"); httpapitest.Str(refused[len(refused)-1], "message") != "three" {
		t.Fatalf("refused event %v", refused)
	}
	code, lines := h.ChatStream(t, "sebastian", "", httpapitest.JSONBody(map[string]any{"message": "four", "session_id": id}))
	if code != 200 || len(lines) == 0 || httpapitest.Str(lines[len(lines)-1], "type") != "error" || !strings.Contains(httpapitest.Str(lines[len(lines)-1], "message"), "budget") {
		t.Fatalf("chat-stream over budget: %d %v", code, lines)
	}
	httpapitest.CheckCompat(t, lines)
	if refused := httpapitest.Until(t, events, "refused"); httpapitest.Str(refused[len(refused)-1], "kind") != "budget" {
		t.Fatalf("refused event %v", refused)
	}
	if n := h.timesSent("three") + h.timesSent("four"); n != 0 {
		t.Fatalf("over-budget messages reached the CLI %d times", n)
	}
	_, info := h.Call(t, "GET", "/api/claude/sessions/"+id, "sebastian", nil)
	if info["spent_usd"] != 1.2 {
		t.Fatalf("spent %v", info["spent_usd"])
	}
	// A new chat has its own session budget, but the day's is shared.
	other := h.NewSession(t)
	if code, out := h.Call(t, "POST", "/api/claude/sessions/"+other+"/messages", "sebastian", map[string]any{"message": "five"}); code != http.StatusAccepted {
		t.Fatalf("new chat: %d %v", code, out)
	}
	h.waitSpent(t, other, 0.6)
	code, out = h.Call(t, "POST", "/api/claude/sessions/"+other+"/messages", "sebastian", map[string]any{"message": "six"})
	if code != http.StatusPaymentRequired || !strings.Contains(out["error"].(string), "today's budget") {
		t.Fatalf("over the day's budget: %d %v", code, out)
	}
	_, usage := h.Call(t, "GET", "/api/claude/usage?days=2", "sebastian", nil)
	days := usage["days"].([]any)
	today := days[0].(map[string]any)
	if len(days) != 2 || today["messages"] != float64(3) || today["input_tokens"] != float64(300) || usage["today_usd"] != 1.7999999999999998 && usage["today_usd"] != 1.8 {
		t.Fatalf("usage %v", usage)
	}
	if lim := usage["limits"].(map[string]any); lim["session_usd"] != float64(1) || lim["person_day_usd"] != 1.5 {
		t.Fatalf("limits %v", lim)
	}
	// Petra's day is her own.
	_, pu := h.Call(t, "GET", "/api/claude/usage?days=1", "petra", nil)
	if pu["today_usd"] != float64(0) {
		t.Fatalf("petra's usage %v", pu)
	}
}

func TestForkShowsTheHistoryAndLeavesTheOriginal(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{reply: scriptedReply, setup: func(f *relaytest.CLI) {
		f.CLISessionIDFunc = func() string { return "cli-conversation" }
	}})
	_, lines := h.ChatStream(t, "sebastian", "", httpapitest.JSONBody(map[string]any{"message": "remember 42"}))
	id := httpapitest.Str(lines[len(lines)-1], "session_id")
	code, fork := h.Call(t, "POST", "/api/claude/sessions/"+id+"/fork", "sebastian", nil)
	if code != http.StatusCreated || fork["id"] == id || fork["forked_from"] != id {
		t.Fatalf("fork: %d %v", code, fork)
	}
	_, hist := h.Call(t, "GET", "/api/claude/history?session_id="+fork["id"].(string), "sebastian", nil)
	if msgs := hist["messages"].([]any); len(msgs) != 2 || msgs[0].(map[string]any)["content"] != "remember 42" {
		t.Fatalf("fork's history %v", hist)
	}
	if _, list := h.Call(t, "GET", "/api/claude/sessions", "sebastian", nil); len(list["sessions"].([]any)) != 2 {
		t.Fatalf("sessions %v", list)
	}
}

// waitSpent waits until the session has spent want.
func (h *harness) waitSpent(tb testing.TB, id string, want float64) {
	tb.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if _, info := h.Call(tb, "GET", "/api/claude/sessions/"+id, "sebastian", nil); info["spent_usd"] == want {
			return
		}
	}
	tb.Fatalf("session %s never spent %v", id, want)
}

func TestRateLimitEventsReachClients(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{reply: scriptedReply})
	id := h.NewSession(t)
	events, detach := h.Attach(t, id, "after=0&types=rate_limit")
	defer detach()
	line := `{"type":"rate_limit_event","rate_limit_info":{"status":"allowed_warning","resetsAt":1795000000,"rateLimitType":"five_hour","utilization":0.91},"uuid":"u1","session_id":"c1"}`
	msg, err := supervisor.DecodeMessage([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	h.fakes.CLI(id).Sink.Publish(supervisor.Event{Kind: supervisor.EventCLI, Msg: msg, Time: time.Now()})
	got := httpapitest.Until(t, events, "rate_limit")[0]
	if httpapitest.Str(got, "status") != "allowed_warning" || httpapitest.Str(got, "window") != "five_hour" ||
		string(got["resets_at"]) != "1795000000" || string(got["utilization"]) != "0.91" {
		t.Fatalf("rate_limit event %v", got)
	}
}

// A message steered into a running turn is checked against the budgets
// like any other: once the day's budget is spent (here by another chat
// while the turn ran), POST messages with steer is 402 and a chat-stream
// with steer ends with the budget's error line; the turn never gets it.
func TestOverBudgetSteersAreRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{reply: scriptedReply, usage: &supervisor.Usage{CostUSD: 0.6, InputTokens: 100, NumTurns: 1},
		limits: relay.Limits{PersonDayUSD: 1}})
	running := h.NewSession(t)
	if code, out := h.Call(t, "POST", "/api/claude/sessions/"+running+"/messages", "sebastian", map[string]any{"message": "[[hang]]"}); code != http.StatusAccepted {
		t.Fatalf("the long turn: %d %v", code, out)
	}
	other := h.NewSession(t)
	for _, text := range []string{"one", "two"} {
		if code, out := h.Call(t, "POST", "/api/claude/sessions/"+other+"/messages", "sebastian", map[string]any{"message": text}); code != http.StatusAccepted {
			t.Fatalf("%s: %d %v", text, code, out)
		}
		h.waitSpent(t, other, map[string]float64{"one": 0.6, "two": 1.2}[text])
	}
	code, out := h.Call(t, "POST", "/api/claude/sessions/"+running+"/messages", "sebastian", map[string]any{"message": "steer me", "steer": true})
	if code != http.StatusPaymentRequired || !strings.Contains(out["error"].(string), "today's budget") {
		t.Fatalf("steer over budget: %d %v", code, out)
	}
	code, lines := h.ChatStream(t, "sebastian", "", httpapitest.JSONBody(map[string]any{"message": "steer me too", "session_id": running, "steer": true}))
	if code != 200 || len(lines) == 0 || httpapitest.Str(lines[len(lines)-1], "type") != "error" || !strings.Contains(httpapitest.Str(lines[len(lines)-1], "message"), "budget") {
		t.Fatalf("chat-stream steer over budget: %d %v", code, lines)
	}
	httpapitest.CheckCompat(t, lines)
	if got := h.fakes.CLI(running).Steered(); len(got) != 0 {
		t.Fatalf("over-budget messages went into the turn: %q", got)
	}
}
