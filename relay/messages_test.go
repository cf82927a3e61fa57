package relay_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
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

// A turn that was interrupted or failed is marked so in the compat history
// (its partial text is never shown as a whole answer), and the rich history
// has every message with a stable id, the tool calls with their inputs and
// results, and each turn's outcome, cost and duration.
func TestHistoryTellsTheTruth(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	if err := os.WriteFile(filepath.Join(h.env.Vault("sebastian"), "notes.md"), []byte("buy oat milk"), 0o644); err != nil {
		t.Fatal(err)
	}
	id := h.NewSession(t)
	a, closeA := h.Attach(t, id, "types=text,error,done")
	defer closeA()
	post := func(msg string) {
		if code, out := h.Call(t, "POST", "/api/claude/sessions/"+id+"/messages", "sebastian", map[string]any{"message": msg}); code != http.StatusAccepted {
			t.Fatalf("post %q: %d %v", msg, code, out)
		}
	}
	post(`[[tool Read {"file_path":"notes.md"}]]`)
	httpapitest.Until(t, a, "done")
	post("[[slow 200 50]]")
	httpapitest.Until(t, a, "text")
	if code, out := h.Call(t, "POST", "/api/claude/sessions/"+id+"/interrupt", "sebastian", nil); code != http.StatusOK {
		t.Fatalf("interrupt: %d %v", code, out)
	}
	httpapitest.Until(t, a, "done")
	post("[[status 400]]")
	httpapitest.Until(t, a, "error")

	// The compat history: exactly {role, content}, marked where the turn
	// did not complete.
	resp := h.Request(t, "GET", "/api/claude/history?session_id="+id, "sebastian", "", "")
	var hist struct {
		Messages []map[string]json.RawMessage `json:"messages"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&hist)
	resp.Body.Close()
	if len(hist.Messages) != 6 {
		t.Fatalf("history has %d messages, want 6: %v", len(hist.Messages), hist.Messages)
	}
	for _, m := range hist.Messages {
		if httpapitest.Keys(m) != "content,role" {
			t.Fatalf("history entry keys %s", httpapitest.Keys(m))
		}
	}
	first, interrupted, failed := httpapitest.Str(hist.Messages[1], "content"), httpapitest.Str(hist.Messages[3], "content"), httpapitest.Str(hist.Messages[5], "content")
	if !strings.HasPrefix(first, "RESULT<<") || !strings.HasSuffix(first, ">>") {
		t.Fatalf("a complete answer is saved as it is: %q", first)
	}
	if !strings.HasPrefix(interrupted, "tick ") || !strings.HasSuffix(interrupted, "\n\n[Interrupted]") {
		t.Fatalf("the interrupted turn's partial answer is not marked: %q", interrupted)
	}
	if !strings.HasPrefix(failed, "[Failed: ") || !strings.Contains(failed, "HTTP 400") {
		t.Fatalf("the failed turn is not marked: %q", failed)
	}

	rich := h.richHistory(t, id)
	if len(rich) != 6 {
		t.Fatalf("rich history has %d messages, want 6: %+v", len(rich), rich)
	}
	ids := map[string]bool{}
	for i, m := range rich {
		ids[m.ID] = true
		wantRole := []string{"user", "assistant"}[i%2]
		if m.Role != wantRole || m.Turn != i/2+1 {
			t.Fatalf("message %d: %s turn %d", i, m.Role, m.Turn)
		}
	}
	if len(ids) != 6 {
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
	if rich[3].Outcome != "interrupted" || !strings.HasPrefix(rich[3].Content, "tick ") || strings.Contains(rich[3].Content, "[Interrupted]") {
		t.Fatalf("interrupted turn: %+v", rich[3])
	}
	if e := rich[5].Error; rich[5].Outcome != "error" || e == nil || e.Kind != "api_error" || e.Status != 400 || !strings.Contains(failed, e.Message) {
		t.Fatalf("failed turn: %+v", rich[5])
	}
	if rich[0].Content != `[[tool Read {"file_path":"notes.md"}]]` {
		t.Fatalf("user message: %+v", rich[0])
	}
}
