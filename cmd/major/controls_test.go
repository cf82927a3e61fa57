package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/majorhq/major/httpapi/httpapitest"
)

// apiClient is the test's HTTP client of s, acting as sebastian.
func apiClient(s *server) httpapitest.Client { return httpapitest.Client{URL: s.url, Token: testToken} }

// turn runs one message on the compat stream and returns its lines; it
// fails the test unless the turn ends with done.
func turn(tb testing.TB, s *server, id, message string) []httpapitest.Event {
	tb.Helper()
	body := map[string]any{"message": message}
	if id != "" {
		body["session_id"] = id
	}
	code, lines := apiClient(s).ChatStream(tb, "sebastian", "", httpapitest.JSONBody(body))
	if code != http.StatusOK || len(lines) == 0 || httpapitest.Str(lines[len(lines)-1], "type") != "done" {
		tb.Fatalf("turn %q: %d %v", message, code, lines)
	}
	return lines
}

// lastModel is the model the scripted model was last asked for.
func lastModel(s *server) string {
	reqs := s.env.Model.Requests()
	return reqs[len(reqs)-1].Model
}

// TestSessionControlsThroughCLI runs the session controls against the real
// CLI on one conversation and its fork, step after step:
//   - the effort and the model change while the CLI runs (the model's next
//     request shows them);
//   - no permission mode lets a tool out of the person's folder;
//   - a fork set to plan mode before its CLI starts asks for the plan as a
//     permission (ExitPlanMode) and is back in default mode after;
//   - the fork recalls the conversation; the original never sees what the
//     fork was told;
//   - a rewind (dry run first) restores the file the agent wrote, commits
//     the restore, and the conversation goes on from before that message;
//   - an expensive turn spends the session's budget and the next message
//     is refused on both streams without reaching the model;
//   - after a restart the spend, the refusal and the chosen model remain, a
//     model chosen while no CLI runs starts the next one (--model), and the
//     conversation resumes with its history.
func TestSessionControlsThroughCLI(t *testing.T) {
	t.Parallel()
	s := start(t, "--max-budget-usd-session", "0.25")
	c := apiClient(s)
	note := filepath.Join(s.env.Vault("sebastian"), "note.md")
	write := func(t *testing.T, id, content string) string {
		lines := turn(t, s, id, `[[tool Write {"file_path":"`+note+`","content":"`+content+`"}]]`)
		return httpapitest.Str(lines[len(lines)-1], "session_id")
	}
	step := func(name string, f func(t *testing.T)) {
		if !t.Run(name, f) {
			t.FailNow()
		}
	}
	// id is the conversation, fork its fork.
	var id, fork string

	step("the agent writes a note twice", func(t *testing.T) {
		id = write(t, "", "one")
		write(t, id, "two")
		if b, _ := os.ReadFile(note); string(b) != "two" {
			t.Fatalf("note.md is %q", b)
		}
	})

	step("the effort changes while the CLI runs", func(t *testing.T) {
		// The default model thinks adaptively; its effort changes through
		// apply_flag_settings.
		if code, out := c.Call(t, "POST", "/api/claude/sessions/"+id+"/thinking", "sebastian", map[string]any{"effort": "xhigh"}); code != 200 {
			t.Fatalf("effort: %d %v", code, out)
		}
		turn(t, s, id, "[[say thinking harder]]")
		reqs := s.env.Model.Requests()
		var body struct {
			OutputConfig struct {
				Effort string `json:"effort"`
			} `json:"output_config"`
		}
		if err := json.Unmarshal(reqs[len(reqs)-1].Raw, &body); err != nil || body.OutputConfig.Effort != "xhigh" {
			t.Fatalf("after the effort change the model was asked with effort %q (%v)", body.OutputConfig.Effort, err)
		}
	})

	step("the model changes while the CLI runs", func(t *testing.T) {
		if m := lastModel(s); m == "claude-sonnet-4-5" {
			t.Fatalf("the default model is already %s", m)
		}
		if code, out := c.Call(t, "POST", "/api/claude/sessions/"+id+"/model", "sebastian", map[string]any{"model": "claude-sonnet-4-5"}); code != 200 {
			t.Fatalf("model: %d %v", code, out)
		}
		turn(t, s, id, "[[say switched]]")
		if m := lastModel(s); m != "claude-sonnet-4-5" {
			t.Fatalf("after the switch the model was asked for %q", m)
		}
		if _, info := c.Call(t, "GET", "/api/claude/sessions/"+id, "sebastian", nil); info["model"] != "claude-sonnet-4-5" {
			t.Fatalf("session shows %v", info)
		}
	})

	step("no mode lets a tool out of the person's folder", func(t *testing.T) {
		for _, mode := range []string{"default", "acceptEdits"} {
			if code, out := c.Call(t, "POST", "/api/claude/sessions/"+id+"/permission-mode", "sebastian", map[string]any{"mode": mode}); code != 200 {
				t.Fatalf("%s: %d %v", mode, code, out)
			}
			target := filepath.Join(s.env.Vault("petra"), mode+".md")
			turn(t, s, id, `[[tool Write {"file_path":"`+target+`","content":"x"}]]`)
			if _, err := os.Stat(target); err == nil {
				t.Fatalf("in %s mode a Write reached another person's folder", mode)
			}
		}
	})

	step("a fork in plan mode asks for the plan as a permission", func(t *testing.T) {
		code, out := c.Call(t, "POST", "/api/claude/sessions/"+id+"/fork", "sebastian", nil)
		if code != http.StatusCreated {
			t.Fatalf("fork: %d %v", code, out)
		}
		fork = out["id"].(string)
		events, detach := c.Attach(t, fork, "after=0")
		defer detach()
		// Set before the fork's CLI starts: it starts in plan mode.
		if code, out := c.Call(t, "POST", "/api/claude/sessions/"+fork+"/permission-mode", "sebastian", map[string]any{"mode": "plan"}); code != 200 {
			t.Fatalf("plan mode: %d %v", code, out)
		}
		if code, out := c.Call(t, "POST", "/api/claude/sessions/"+fork+"/messages", "sebastian",
			map[string]any{"message": `[[tool ExitPlanMode {"plan":"1. Write plan.md"}]]`}); code != http.StatusAccepted {
			t.Fatalf("message: %d %v", code, out)
		}
		perm := httpapitest.Until(t, events, "permission")
		ask := perm[len(perm)-1]
		if httpapitest.Str(ask, "tool") != "ExitPlanMode" {
			t.Fatalf("permission event %v", ask)
		}
		if code, out := c.Call(t, "POST", "/api/claude/sessions/"+fork+"/permission", "sebastian",
			map[string]any{"request_id": httpapitest.Str(ask, "request_id"), "behavior": "allow"}); code != 200 {
			t.Fatalf("approve the plan: %d %v", code, out)
		}
		httpapitest.Until(t, events, "done")
		if _, info := c.Call(t, "GET", "/api/claude/sessions/"+fork, "sebastian", nil); info["permission_mode"] != "default" {
			t.Fatalf("after the approved plan the session shows %v", info)
		}
	})

	step("the fork recalls the conversation and the original not the fork's", func(t *testing.T) {
		recall := httpapitest.StreamText(turn(t, s, fork, "fork-only [[recall]]"))
		if !strings.Contains(recall, `"content":"two"`) || !strings.Contains(recall, "fork-only") {
			t.Fatalf("the fork recalls %q", recall)
		}
		recall = httpapitest.StreamText(turn(t, s, id, "original [[recall]]"))
		if strings.Contains(recall, "fork-only") || !strings.Contains(recall, `"content":"two"`) {
			t.Fatalf("the original recalls %q", recall)
		}
	})

	step("a rewind restores the note and commits it", func(t *testing.T) {
		rewind := func(body map[string]any) map[string]any {
			code, out := c.Call(t, "POST", "/api/claude/sessions/"+id+"/rewind", "sebastian", body)
			if code != 200 {
				t.Fatalf("rewind %v: %d %v", body, code, out)
			}
			return out
		}
		// To before the second message: a dry run changes nothing.
		dry := rewind(map[string]any{"message_id": "turn-2-user", "dry_run": true})
		if files, _ := json.Marshal(dry["files"]); string(files) != `["note.md"]` {
			t.Fatalf("dry run: %v", dry)
		}
		if b, _ := os.ReadFile(note); string(b) != "two" {
			t.Fatalf("a dry run changed note.md to %q", b)
		}
		head := gitIn(t, s.env.VaultRoot, "rev-parse", "HEAD")
		done := rewind(map[string]any{"message_id": "turn-2-user", "conversation": true})
		if files, _ := json.Marshal(done["files"]); string(files) != `["note.md"]` {
			t.Fatalf("rewind: %v", done)
		}
		if b, _ := os.ReadFile(note); string(b) != "one" {
			t.Fatalf("after the rewind note.md is %q", b)
		}
		if gitIn(t, s.env.VaultRoot, "rev-parse", "HEAD") == head || gitIn(t, s.env.VaultRoot, "status", "--porcelain") != "" {
			t.Fatal("the restore was not committed")
		}
		if got := gitIn(t, s.env.VaultRoot, "show", "HEAD:sebastian/note.md"); got != "one" {
			t.Fatalf("the commit has note.md %q", got)
		}
	})

	step("the conversation goes on from before the rewound message", func(t *testing.T) {
		recall := httpapitest.StreamText(turn(t, s, id, "after rewind [[recall]]"))
		if strings.Contains(recall, `"content":"two"`) || strings.Contains(recall, "original") || !strings.Contains(recall, `"content":"one"`) {
			t.Fatalf("after the rewind the model recalls %q", recall)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			_, hist := c.Call(t, "GET", "/api/claude/history?session_id="+id, "sebastian", nil)
			if msgs := hist["messages"].([]any); len(msgs) == 4 {
				break
			} else if time.Now().After(deadline) {
				t.Fatalf("history after the rewind: %v", msgs)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})

	step("an expensive turn spends the session's budget", func(t *testing.T) {
		// The CLI stops it (--max-budget-usd) and the next message never
		// reaches the model.
		code, out := c.Call(t, "POST", "/api/claude/sessions/"+fork+"/messages", "sebastian", map[string]any{"message": "[[cost 100000]]"})
		if code != http.StatusAccepted {
			t.Fatalf("costly: %d %v", code, out)
		}
		costEvents, detachCost := c.Attach(t, fork, fmt.Sprintf("after=%d&types=done,error", int64(out["after"].(float64))))
		defer detachCost()
		var cost httpapitest.Event
		for cost == nil || httpapitest.Str(cost, "type") == "ping" {
			select {
			case cost = <-costEvents:
			case <-time.After(60 * time.Second):
				t.Fatal("the expensive turn did not end")
			}
		}
		var usage struct {
			CostUSD     float64 `json:"cost_usd"`
			InputTokens int64   `json:"input_tokens"`
		}
		if err := json.Unmarshal(cost["usage"], &usage); err != nil || usage.InputTokens < 100000 || usage.CostUSD < 0.25 {
			t.Fatalf("the expensive turn's end carries %s (%v)", cost, err)
		}
		asked := len(s.env.Model.Requests())
		code, out = c.Call(t, "POST", "/api/claude/sessions/"+fork+"/messages", "sebastian", map[string]any{"message": "one more"})
		if code != http.StatusPaymentRequired || !strings.Contains(out["error"].(string), "budget") {
			t.Fatalf("over budget: %d %v", code, out)
		}
		code, refused := c.ChatStream(t, "sebastian", "", httpapitest.JSONBody(map[string]any{"message": "and more", "session_id": fork}))
		if code != 200 || len(refused) == 0 || !strings.Contains(httpapitest.Str(refused[len(refused)-1], "message"), "budget") {
			t.Fatalf("chat-stream over budget: %d %v", code, refused)
		}
		if n := len(s.env.Model.Requests()); n != asked {
			t.Fatalf("refused messages reached the model (%d requests, then %d)", asked, n)
		}
	})

	step("spend, model and conversation survive a restart", func(t *testing.T) {
		s.stop(t)
		s = restart(t, s)
		c = apiClient(s)
		_, info := c.Call(t, "GET", "/api/claude/sessions/"+fork, "sebastian", nil)
		if spent, _ := info["spent_usd"].(float64); spent < 0.25 {
			t.Fatalf("after a restart the session shows %v", info)
		}
		if code, _ := c.Call(t, "POST", "/api/claude/sessions/"+fork+"/messages", "sebastian", map[string]any{"message": "after restart"}); code != http.StatusPaymentRequired {
			t.Fatalf("after a restart an over-budget message got %d", code)
		}
		if _, u := c.Call(t, "GET", "/api/claude/usage?days=1", "sebastian", nil); u["today_usd"].(float64) < 0.25 {
			t.Fatalf("usage after a restart: %v", u)
		}
		if _, info := c.Call(t, "GET", "/api/claude/sessions/"+id, "sebastian", nil); info["model"] != "claude-sonnet-4-5" {
			t.Fatalf("after a restart the session shows %v", info)
		}
		// A model chosen while no CLI runs starts the next one (--model).
		if code, out := c.Call(t, "POST", "/api/claude/sessions/"+id+"/model", "sebastian", map[string]any{"model": "claude-haiku-4-5"}); code != 200 {
			t.Fatalf("model: %d %v", code, out)
		}
		recall := httpapitest.StreamText(turn(t, s, id, "[[recall]]"))
		if m := lastModel(s); m != "claude-haiku-4-5" {
			t.Fatalf("a model chosen between processes: asked for %q", m)
		}
		if !strings.Contains(recall, `"content":"one"`) || !strings.Contains(recall, "after rewind [[recall]] | [[recall]]") || strings.Contains(recall, `"content":"two"`) {
			t.Fatalf("resumed after a restart, the model recalls %q", recall)
		}
	})
}

// Each permission mode a person may choose, through the real CLI: a note
// written in it, and what the person was asked. "Edit notes"
// (acceptEdits) writes without asking; "Ask first" (default) asks before
// every change to the notes and writes only what the person allows,
// while reading is not a change and is not asked; "Plan first" (plan)
// writes nothing.
func TestPermissionModesAndWhatIsAsked(t *testing.T) {
	t.Parallel()
	s := start(t)
	c := apiClient(s)
	tests := []struct {
		name   string
		mode   string
		tool   string // Write or Read
		answer string // allow or deny, for a permission asked
		asked  []string
		wrote  bool
	}{
		{name: "edit notes writes without asking", mode: "acceptEdits", tool: "Write", wrote: true},
		{name: "ask first asks, and writes what is allowed", mode: "default", tool: "Write", answer: "allow", asked: []string{"Write"}, wrote: true},
		{name: "ask first asks, and writes nothing denied", mode: "default", tool: "Write", answer: "deny", asked: []string{"Write"}},
		{name: "ask first asks before an edit", mode: "default", tool: "Edit", answer: "deny", asked: []string{"Edit"}},
		{name: "ask first reads without asking", mode: "default", tool: "Read"},
		{name: "plan first writes nothing, and does not ask", mode: "plan", tool: "Write"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			note := filepath.Join(s.env.Vault("sebastian"), fmt.Sprintf("mode-%d.md", i))
			writeFile(t, note, "before\n")
			code, out := c.Call(t, "POST", "/api/claude/sessions", "sebastian", nil)
			if code != http.StatusCreated {
				t.Fatalf("new session: %d %v", code, out)
			}
			id := out["id"].(string)
			if code, out := c.Call(t, "POST", "/api/claude/sessions/"+id+"/permission-mode", "sebastian", map[string]any{"mode": tt.mode}); code != 200 {
				t.Fatalf("mode %s: %d %v", tt.mode, code, out)
			}
			events, detach := c.Attach(t, id, "after=0&types=permission,done,error")
			defer detach()
			var call string
			switch tt.tool {
			case "Write":
				call = `[[tool Write {"file_path":"` + note + `","content":"after\n"}]]`
			case "Edit":
				call = `[[tool Edit {"file_path":"` + note + `","old_string":"before","new_string":"after"}]]`
			case "Read":
				// A read first, so the edit that follows may run.
				call = `[[tool Read {"file_path":"` + note + `"}]]`
			}
			if tt.tool == "Edit" {
				// The CLI edits only a file it has read in the session.
				turn(t, s, id, `[[tool Read {"file_path":"`+note+`"}]]`)
				httpapitest.Until(t, events, "done")
			}
			if code, out := c.Call(t, "POST", "/api/claude/sessions/"+id+"/messages", "sebastian", map[string]any{"message": call}); code != http.StatusAccepted {
				t.Fatalf("message: %d %v", code, out)
			}
			var asked []string
			for end := false; !end; {
				select {
				case ev, ok := <-events:
					if !ok {
						t.Fatal("the stream ended before the turn")
					}
					switch httpapitest.Str(ev, "type") {
					case "permission":
						asked = append(asked, httpapitest.Str(ev, "tool"))
						if code, out := c.Call(t, "POST", "/api/claude/sessions/"+id+"/permission", "sebastian",
							map[string]any{"request_id": httpapitest.Str(ev, "request_id"), "behavior": tt.answer}); code != 200 {
							t.Fatalf("answer: %d %v", code, out)
						}
					case "done", "error":
						end = true
					}
				case <-time.After(60 * time.Second):
					t.Fatal("the turn never ended")
				}
			}
			if strings.Join(asked, ",") != strings.Join(tt.asked, ",") {
				t.Errorf("asked about %v, want %v", asked, tt.asked)
			}
			b, _ := os.ReadFile(note)
			if wrote := string(b) == "after\n"; wrote != tt.wrote {
				t.Errorf("the note is %q", b)
			}
		})
	}
}
