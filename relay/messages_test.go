package relay_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/majorhq/major/httpapi/httpapitest"
)

type richMessage struct {
	ID      string `json:"id"`
	Role    string `json:"role"`
	Turn    int    `json:"turn"`
	Content string `json:"content"`
	Parts   []struct {
		Type    string          `json:"type"`
		Text    string          `json:"text"`
		ID      string          `json:"id"`
		Name    string          `json:"name"`
		Input   json.RawMessage `json:"input"`
		Result  *string         `json:"result"`
		IsError bool            `json:"is_error"`
	} `json:"parts"`
	Outcome string `json:"outcome"`
	Error   *struct {
		Kind    string `json:"kind"`
		Message string `json:"message"`
		Status  int    `json:"status"`
	} `json:"error"`
	CostUSD    *float64 `json:"cost_usd"`
	DurationMS int64    `json:"duration_ms"`
}

func (h *harness) richHistory(tb testing.TB, id string) []richMessage {
	tb.Helper()
	resp := h.Request(tb, "GET", "/api/claude/sessions/"+id+"/messages", "sebastian", "", "")
	defer resp.Body.Close()
	var out struct {
		SessionID string        `json:"session_id"`
		Messages  []richMessage `json:"messages"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK || out.SessionID != id {
		tb.Fatalf("rich history: %d %v %+v", resp.StatusCode, err, out)
	}
	return out.Messages
}

// checkHistory checks session id's histories after turns where the first
// ran the Read tool call (message read) on notes.md, the interrupted-th
// was interrupted after some text and the failed-th failed with HTTP 400,
// of turns in all: the compat history is exactly {role, content} per
// message, marked where the turn did not complete (its partial text is
// never shown as a whole answer), and the rich history has every message
// with a stable id, the tool call with its input and result, and each
// turn's outcome, cost and duration.
func checkHistory(t *testing.T, h *harness, id, read string, turns, interrupted, failed int) {
	t.Helper()
	resp := h.Request(t, "GET", "/api/claude/history?session_id="+id, "sebastian", "", "")
	var hist struct {
		Messages []map[string]json.RawMessage `json:"messages"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&hist)
	resp.Body.Close()
	if len(hist.Messages) != 2*turns {
		t.Fatalf("history has %d messages, want %d: %v", len(hist.Messages), 2*turns, hist.Messages)
	}
	for _, m := range hist.Messages {
		if httpapitest.Keys(m) != "content,role" {
			t.Fatalf("history entry keys %s", httpapitest.Keys(m))
		}
	}
	answer := func(turn int) string { return httpapitest.Str(hist.Messages[2*turn-1], "content") }
	first, cut, bad := answer(1), answer(interrupted), answer(failed)
	if !strings.HasPrefix(first, "RESULT<<") || !strings.HasSuffix(first, ">>") {
		t.Fatalf("a complete answer is saved as it is: %q", first)
	}
	if !strings.HasPrefix(cut, "tick ") || !strings.HasSuffix(cut, "\n\n[Interrupted]") {
		t.Fatalf("the interrupted turn's partial answer is not marked: %q", cut)
	}
	if !strings.HasPrefix(bad, "[Failed: ") || !strings.Contains(bad, "HTTP 400") {
		t.Fatalf("the failed turn is not marked: %q", bad)
	}

	rich := h.richHistory(t, id)
	if len(rich) != 2*turns {
		t.Fatalf("rich history has %d messages, want %d: %+v", len(rich), 2*turns, rich)
	}
	ids := map[string]bool{}
	for i, m := range rich {
		ids[m.ID] = true
		wantRole := []string{"user", "assistant"}[i%2]
		if m.Role != wantRole || m.Turn != i/2+1 {
			t.Fatalf("message %d: %s turn %d", i, m.Role, m.Turn)
		}
	}
	if len(ids) != 2*turns {
		t.Fatalf("ids are not unique: %v", ids)
	}
	again := h.richHistory(t, id)
	for i := range rich {
		if again[i].ID != rich[i].ID {
			t.Fatalf("ids change between calls: %s, %s", rich[i].ID, again[i].ID)
		}
	}

	tool := rich[1]
	if tool.Outcome != "success" || tool.DurationMS <= 0 || tool.CostUSD == nil || len(tool.Parts) != 2 {
		t.Fatalf("tool turn: %+v", tool)
	}
	call := tool.Parts[0]
	if call.Type != "tool" || call.Name != "Read" || call.ID == "" || string(call.Input) != `{"file_path":"notes.md"}` ||
		call.Result == nil || !strings.Contains(*call.Result, "buy oat milk") {
		t.Fatalf("tool call: %+v", call)
	}
	if tool.Parts[1].Type != "text" || tool.Content != first {
		t.Fatalf("tool turn text: %+v, content %q", tool.Parts[1], tool.Content)
	}
	if r := rich[2*interrupted-1]; r.Outcome != "interrupted" || !strings.HasPrefix(r.Content, "tick ") || strings.Contains(r.Content, "[Interrupted]") {
		t.Fatalf("interrupted turn: %+v", r)
	}
	if r := rich[2*failed-1]; r.Outcome != "error" || r.Error == nil || r.Error.Kind != "api_error" || r.Error.Status != 400 || !strings.Contains(bad, r.Error.Message) {
		t.Fatalf("failed turn: %+v", r)
	}
	if rich[0].Content != read {
		t.Fatalf("user message: %+v", rich[0])
	}
}
