package main

import (
	"encoding/json"
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

func TestSessionControlsThroughCLI(t *testing.T) {
	t.Parallel()
	s := start(t, "--max-budget-usd-session", "0.25")
	c := apiClient(s)

	lines := turn(t, s, "", "hello")
	id := httpapitest.Str(lines[len(lines)-1], "session_id")
	// The effort of adaptive thinking (the default model thinks
	// adaptively) changes while the CLI runs (apply_flag_settings) ...
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

	// ... and so does the model (set_model) ...
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

	// ... plan mode asks for the plan as a permission ...
	plan := c.NewSession(t)
	events, detach := c.Attach(t, plan, "after=0")
	defer detach()
	if code, out := c.Call(t, "POST", "/api/claude/sessions/"+plan+"/permission-mode", "sebastian", map[string]any{"mode": "plan"}); code != 200 {
		t.Fatalf("plan mode: %d %v", code, out)
	}
	if code, out := c.Call(t, "POST", "/api/claude/sessions/"+plan+"/messages", "sebastian",
		map[string]any{"message": `[[tool ExitPlanMode {"plan":"1. Write plan.md"}]]`}); code != http.StatusAccepted {
		t.Fatalf("message: %d %v", code, out)
	}
	perm := httpapitest.Until(t, events, "permission")
	ask := perm[len(perm)-1]
	if httpapitest.Str(ask, "tool") != "ExitPlanMode" {
		t.Fatalf("permission event %v", ask)
	}
	if code, out := c.Call(t, "POST", "/api/claude/sessions/"+plan+"/permission", "sebastian",
		map[string]any{"request_id": httpapitest.Str(ask, "request_id"), "behavior": "allow"}); code != 200 {
		t.Fatalf("approve the plan: %d %v", code, out)
	}
	httpapitest.Until(t, events, "done")
	if _, info := c.Call(t, "GET", "/api/claude/sessions/"+plan, "sebastian", nil); info["permission_mode"] != "default" {
		t.Fatalf("after the approved plan the session shows %v", info)
	}

	// ... and no mode lets a tool out of the person's folder.
	for _, mode := range []string{"default", "acceptEdits"} {
		if code, out := c.Call(t, "POST", "/api/claude/sessions/"+plan+"/permission-mode", "sebastian", map[string]any{"mode": mode}); code != 200 {
			t.Fatalf("%s: %d %v", mode, code, out)
		}
		target := filepath.Join(s.env.Vault("petra"), mode+".md")
		turn(t, s, plan, `[[tool Write {"file_path":"`+target+`","content":"x"}]]`)
		if _, err := os.Stat(target); err == nil {
			t.Fatalf("in %s mode a Write reached another person's folder", mode)
		}
	}

	// An expensive turn spends the session's budget: the CLI stops it
	// (--max-budget-usd) and the next message never reaches the model.
	costly := c.NewSession(t)
	costEvents, detachCost := c.Attach(t, costly, "after=0&types=done,error")
	defer detachCost()
	if code, out := c.Call(t, "POST", "/api/claude/sessions/"+costly+"/messages", "sebastian", map[string]any{"message": "[[cost 100000]]"}); code != http.StatusAccepted {
		t.Fatalf("costly: %d %v", code, out)
	}
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
	code, out := c.Call(t, "POST", "/api/claude/sessions/"+costly+"/messages", "sebastian", map[string]any{"message": "one more"})
	if code != http.StatusPaymentRequired || !strings.Contains(out["error"].(string), "budget") {
		t.Fatalf("over budget: %d %v", code, out)
	}
	code, refused := c.ChatStream(t, "sebastian", "", httpapitest.JSONBody(map[string]any{"message": "and more", "session_id": costly}))
	if code != 200 || len(refused) == 0 || !strings.Contains(httpapitest.Str(refused[len(refused)-1], "message"), "budget") {
		t.Fatalf("chat-stream over budget: %d %v", code, refused)
	}
	if n := len(s.env.Model.Requests()); n != asked {
		t.Fatalf("refused messages reached the model (%d requests, then %d)", asked, n)
	}

	// The spend and the chosen model survive a restart; a model chosen
	// while no CLI runs starts the next one (--model).
	s.stop(t)
	s = restart(t, s)
	c = apiClient(s)
	_, info := c.Call(t, "GET", "/api/claude/sessions/"+costly, "sebastian", nil)
	if spent, _ := info["spent_usd"].(float64); spent < 0.25 {
		t.Fatalf("after a restart the session shows %v", info)
	}
	if code, _ := c.Call(t, "POST", "/api/claude/sessions/"+costly+"/messages", "sebastian", map[string]any{"message": "after restart"}); code != http.StatusPaymentRequired {
		t.Fatalf("after a restart an over-budget message got %d", code)
	}
	if _, u := c.Call(t, "GET", "/api/claude/usage?days=1", "sebastian", nil); u["today_usd"].(float64) < 0.25 {
		t.Fatalf("usage after a restart: %v", u)
	}
	if _, info := c.Call(t, "GET", "/api/claude/sessions/"+id, "sebastian", nil); info["model"] != "claude-sonnet-4-5" {
		t.Fatalf("after a restart the session shows %v", info)
	}
	if code, out := c.Call(t, "POST", "/api/claude/sessions/"+id+"/model", "sebastian", map[string]any{"model": "claude-haiku-4-5"}); code != 200 {
		t.Fatalf("model: %d %v", code, out)
	}
	turn(t, s, id, "[[say haiku]]")
	if m := lastModel(s); m != "claude-haiku-4-5" {
		t.Fatalf("a model chosen between processes: asked for %q", m)
	}
}

func TestForkAndRewindThroughCLI(t *testing.T) {
	t.Parallel()
	s := start(t)
	c := apiClient(s)
	note := filepath.Join(s.env.Vault("sebastian"), "note.md")
	write := func(id, content string) string {
		lines := turn(t, s, id, `[[tool Write {"file_path":"`+note+`","content":"`+content+`"}]]`)
		return httpapitest.Str(lines[len(lines)-1], "session_id")
	}
	id := write("", "one")
	write(id, "two")
	if b, _ := os.ReadFile(note); string(b) != "two" {
		t.Fatalf("note.md is %q", b)
	}

	// Fork: the fork recalls the conversation; the original never sees
	// what the fork was told.
	code, fork := c.Call(t, "POST", "/api/claude/sessions/"+id+"/fork", "sebastian", nil)
	if code != http.StatusCreated {
		t.Fatalf("fork: %d %v", code, fork)
	}
	fid := fork["id"].(string)
	recall := httpapitest.StreamText(turn(t, s, fid, "fork-only [[recall]]"))
	if !strings.Contains(recall, `"content":"two"`) || !strings.Contains(recall, "fork-only") {
		t.Fatalf("the fork recalls %q", recall)
	}
	recall = httpapitest.StreamText(turn(t, s, id, "original [[recall]]"))
	if strings.Contains(recall, "fork-only") || !strings.Contains(recall, `"content":"two"`) {
		t.Fatalf("the original recalls %q", recall)
	}

	// Rewind to before the second message: a dry run changes nothing.
	rewind := func(body map[string]any) map[string]any {
		code, out := c.Call(t, "POST", "/api/claude/sessions/"+id+"/rewind", "sebastian", body)
		if code != 200 {
			t.Fatalf("rewind %v: %d %v", body, code, out)
		}
		return out
	}
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
	// The conversation goes on from before the second message.
	recall = httpapitest.StreamText(turn(t, s, id, "after rewind [[recall]]"))
	if strings.Contains(recall, `"content":"two"`) || strings.Contains(recall, "original") || !strings.Contains(recall, `"content":"one"`) {
		t.Fatalf("after the rewind the model recalls %q", recall)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, hist := c.Call(t, "GET", "/api/claude/history?session_id="+id, "sebastian", nil)
		if msgs := hist["messages"].([]any); len(msgs) == 4 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("history after the rewind: %v", msgs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
