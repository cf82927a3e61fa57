package scriptedmodel_test

import (
	"encoding/json"
	"testing"

	"github.com/majorhq/major/scriptedmodel"
)

// A [[steps N MS]] turn makes N tool calls, one per request, and then
// names every text the person sent since it opened: a message handed to
// the turn beside a tool result counts, and does not open a turn of its
// own. Another turn's tool result is answered as usual.
func TestStepsDirective(t *testing.T) {
	t.Parallel()
	user := func(blocks ...map[string]any) map[string]any {
		return map[string]any{"role": "user", "content": blocks}
	}
	text := func(s string) map[string]any { return map[string]any{"type": "text", "text": s} }
	result := func(id string) map[string]any {
		return map[string]any{"type": "tool_result", "tool_use_id": id, "content": "No files found"}
	}
	call := func(id string) map[string]any {
		return map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": id, "name": "Glob", "input": map[string]any{}}}}
	}
	cases := []struct {
		name     string
		messages []any
		tool     string
		text     string
	}{
		{"first step", []any{user(text("[[steps 2 0]]"))}, "Glob", ""},
		{"second step", []any{user(text("[[steps 2 0]]")), call("a"), user(result("a"))}, "Glob", ""},
		{"done, with a message handed in", []any{user(text("[[steps 2 0]]")), call("a"), user(result("a"), text("also this")), call("b"), user(result("b"))},
			"", "STEPS DONE; heard: also this"},
		{"another turn's tool", []any{user(text("[[steps 1 0]]")), call("a"), user(result("a")), map[string]any{"role": "assistant", "content": "ok"},
			user(text("[[tool Read {}]]")), call("c"), user(result("c"))}, "", "RESULT<<No files found>>"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			raw, _ := json.Marshal(map[string]any{"model": "m", "messages": tc.messages})
			var req scriptedmodel.Request
			if err := json.Unmarshal(raw, &req); err != nil {
				t.Fatal(err)
			}
			r := scriptedmodel.Script(req)
			if len(r.Blocks) != 1 || r.Blocks[0].Name != tc.tool || r.Blocks[0].Text != tc.text {
				t.Fatalf("reply %+v, want tool %q text %q", r.Blocks, tc.tool, tc.text)
			}
		})
	}
}
