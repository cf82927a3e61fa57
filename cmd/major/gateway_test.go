package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/majorhq/major/scriptedmodel"
)

// What a person's CLIs spend is counted by the model gateway, request by
// request, and the budget holds there, whoever asks:
//   - a turn whose CLI dies after an expensive model request has paid for
//     it: the session and the person's day show the cost (the CLI never
//     reported it);
//   - once the session's budget is spent, a prompt typed in the session's
//     terminal (a CLI with no budget flag of its own) never reaches the
//     model, and the terminal says why.
func TestGatewayMetersAndHoldsTheBudget(t *testing.T) {
	t.Parallel()
	const marker = "COSTLY-THEN-HANG"
	// No budget yet: the CLI's own cap would stop the turn before the
	// request that hangs.
	conf := t.TempDir()
	s := startModel(t, func(req scriptedmodel.Request) scriptedmodel.Reply {
		if !strings.Contains(string(req.Raw), marker) {
			return scriptedmodel.Script(req)
		}
		if len(req.ToolResults()) == 0 {
			// 200,000 input tokens: $0.80 at the default model's price.
			r := scriptedmodel.ToolUse("Glob", map[string]string{"pattern": "*.md"})
			r.InputTokens = 200000
			return r
		}
		return scriptedmodel.Reply{Hang: true}
	}, "--config-dir", conf)

	id := s.newSessionAs(t, "sebastian")
	step := func(name string, f func(t *testing.T)) {
		if !t.Run(name, f) {
			t.FailNow()
		}
	}
	step("a crashed turn is paid for", func(t *testing.T) {
		r := s.req(t, "POST", "/api/claude/sessions/"+id+"/messages", `{"message":"`+marker+`"}`)
		if r.StatusCode != 202 {
			t.Fatalf("message: %d %s", r.StatusCode, readAll(t, r))
		}
		readAll(t, r)
		// The second model request (after the tool) hangs: the CLI dies
		// there, before it could report what the turn cost.
		waitFor(t, 60*time.Second, "the hanging request", func() bool {
			reqs := s.env.Model.Requests()
			return len(reqs) > 0 && len(reqs[len(reqs)-1].ToolResults()) > 0 && strings.Contains(string(reqs[len(reqs)-1].Raw), marker)
		})
		killed := 0
		pids, _ := os.ReadDir(filepath.Join(s.state, "pids"))
		for _, p := range pids {
			if pid, err := strconv.Atoi(p.Name()); err == nil && syscall.Kill(-pid, syscall.SIGKILL) == nil {
				killed++
			}
		}
		if killed == 0 {
			t.Fatal("no CLI to kill")
		}
		waitFor(t, 30*time.Second, "the crashed turn's end", func() bool {
			return strings.Contains(readAll(t, s.req(t, "GET", "/api/claude/sessions/"+id, "")), `"state":"idle"`)
		})
		var info struct {
			SpentUSD float64 `json:"spent_usd"`
		}
		_ = json.Unmarshal([]byte(readAll(t, s.req(t, "GET", "/api/claude/sessions/"+id, ""))), &info)
		if info.SpentUSD < 0.8 {
			t.Errorf("the session spent $%v; the crashed turn's first request cost $0.80", info.SpentUSD)
		}
		var use struct {
			TodayUSD float64 `json:"today_usd"`
			Total    struct {
				InputTokens int64 `json:"input_tokens"`
			} `json:"total"`
		}
		_ = json.Unmarshal([]byte(readAll(t, s.req(t, "GET", "/api/claude/usage?days=1", ""))), &use)
		if use.TodayUSD < 0.8 || use.Total.InputTokens < 200000 {
			t.Errorf("the person's day shows $%v and %d input tokens; the crashed turn's first request cost $0.80 for 200,000",
				use.TodayUSD, use.Total.InputTokens)
		}
	})

	step("the terminal of a spent session reaches no model", func(t *testing.T) {
		// The session's budget, $0.50, is below what it spent.
		writeConfig(t, conf, map[string]string{"persons/sebastian/config.json": `{"limits":{"session_usd":0.5}}`})
		waitFor(t, 10*time.Second, "the limit", func() bool {
			return strings.Contains(readAll(t, s.req(t, "GET", "/api/claude/usage?days=1", "")), `"session_usd":0.5`)
		})
		term := openTerminal(t, s, id)
		defer term.Close()
		waitFor(t, 120*time.Second, "the CLI's prompt", func() bool { return strings.Contains(term.Text(), "accept edits on") })
		before := len(s.env.Model.Requests())
		submit(t, term, "[[say from the terminal]] TERMINAL-PROMPT", "the refusal", func() bool {
			return strings.Contains(term.Text(), "used its budget")
		})
		for _, r := range s.env.Model.Requests()[before:] {
			if strings.Contains(string(r.Raw), "TERMINAL-PROMPT") {
				t.Fatal("the terminal's prompt reached the model over budget")
			}
		}
	})
}
