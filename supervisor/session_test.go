package supervisor_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/clitest"
	"github.com/majorhq/major/internal/procgroup"
	"github.com/majorhq/major/scriptedmodel"
	"github.com/majorhq/major/supervisor"
)

func newSession(tb testing.TB, env *clitest.Env, rec *clitest.Recorder, mutate func(*supervisor.CLIConfig)) *supervisor.CLI {
	tb.Helper()
	cfg := supervisor.CLIConfig{
		ID:     "s-" + strings.ReplaceAll(tb.Name(), "/", "-"),
		Person: "sebastian",
		Dir:    env.Vault("sebastian"),
		Spec: supervisor.Spec{
			Binary:         env.Binary,
			Env:            env.ChildEnv(),
			SystemPrompt:   "You are a test assistant.",
			Tools:          []string{"Read", "Write", "Edit", "Glob", "Grep"},
			PermissionMode: "acceptEdits",
			Grace:          2 * time.Second,
		},
		Sink:   rec,
		Logger: zerolog.New(zerolog.NewTestWriter(tb)).Level(zerolog.InfoLevel),
	}
	if mutate != nil {
		mutate(&cfg)
	}
	s := supervisor.NewCLI(cfg)
	tb.Cleanup(func() {
		pid := s.Pid()
		if err := s.Close(); err != nil {
			tb.Errorf("close session: %v", err)
		}
		if pid != 0 {
			assertGroupGone(tb, pid)
		}
	})
	return s
}

// assertGroupGone fails the test if any process of the group is left.
func assertGroupGone(tb testing.TB, pgid int) {
	tb.Helper()
	if live := procgroup.WaitGone(pgid, 3*time.Second); len(live) != 0 {
		tb.Errorf("process group %d still has processes %v", pgid, live)
	}
}

func send(tb testing.TB, s *supervisor.CLI, text string) {
	tb.Helper()
	if err := s.Send(context.Background(), text); err != nil {
		tb.Fatalf("send %q: %v", text, err)
	}
}

func waitFor(tb testing.TB, within time.Duration, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("condition not met within %s", within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// probeHandlers answer the CLI for TestSessionThroughCLI: an SDK MCP
// server "probe" with one tool, echo, and a PreToolUse hook that denies
// every Read. Each hook call and MCP method is recorded.
type probeHandlers struct {
	mu         sync.Mutex
	hookTools  []string
	mcpMethods []string
}

func (p *probeHandlers) handlers(*supervisor.CLI) supervisor.Handlers {
	return supervisor.Handlers{
		HookCallback: func(ctx context.Context, req *supervisor.ControlRequest) (json.RawMessage, error) {
			var in supervisor.HookInput
			_ = json.Unmarshal(req.HookInput, &in)
			p.mu.Lock()
			p.hookTools = append(p.hookTools, req.CallbackID+":"+in.ToolName)
			p.mu.Unlock()
			return json.RawMessage(`{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"probe says no"}}`), nil
		},
		MCPMessage: func(ctx context.Context, server string, msg json.RawMessage) (json.RawMessage, error) {
			var m struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
			}
			_ = json.Unmarshal(msg, &m)
			p.mu.Lock()
			p.mcpMethods = append(p.mcpMethods, server+":"+m.Method)
			p.mu.Unlock()
			var result string
			switch m.Method {
			case "initialize":
				result = `{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"probe","version":"1"}}`
			case "tools/list":
				result = `{"tools":[{"name":"echo","description":"echo","inputSchema":{"type":"object","properties":{"text":{"type":"string"}}}}]}`
			case "tools/call":
				result = `{"content":[{"type":"text","text":"echoed"}]}`
			default:
				return json.RawMessage(`{"jsonrpc":"2.0","id":0,"result":{}}`), nil
			}
			return json.RawMessage(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":` + result + `}`), nil
		},
	}
}

// TestSessionThroughCLI runs one session through the real CLI, step by
// step (the process started for the fresh conversation serves every step
// after it). It proves that:
//   - control requests need a live process (ErrNotRunning before one);
//   - values that start with dashes reach the CLI as their flags' values:
//     --resume=-x is judged by the CLI as an id (no "unknown option"), and
//     a system prompt starting with "--help -v" reaches the model;
//   - a --resume the CLI has no conversation for starts a fresh
//     conversation, once, with a notice;
//   - SDK MCP servers and hook callbacks are plumbed both ways (the model
//     sees the MCP tool's result and the hook's denial);
//   - a failing model ends the turn with an error result, and the process
//     takes the next turn;
//   - set_permission_mode and set_model are answered, an unknown control
//     request gets the CLI's error matched by id, and the next turn uses
//     the new model;
//   - the session's permission mode is the one the CLI says is in effect;
//   - a 2 MB answer arrives intact, streamed, as one assistant line of
//     over 2 MB (far past any fixed line buffer) and as the result.
func TestSessionThroughCLI(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var system string
	env := clitest.New(t, func(req scriptedmodel.Request) scriptedmodel.Reply {
		mu.Lock()
		system = string(req.System)
		mu.Unlock()
		return scriptedmodel.Script(req)
	})
	const prompt = "--help -v You are a test assistant whose prompt starts with dashes."
	const missing = "8d0a5ef4-5a1e-4b7e-9d55-000000000000"
	probe := &probeHandlers{}
	rec := clitest.NewRecorder()
	s := newSession(t, env, rec, func(c *supervisor.CLIConfig) {
		c.CLISessionID = "-x"
		c.Spec.SystemPrompt = prompt
		c.Spec.Env = append(c.Spec.Env, "CLAUDE_CODE_MAX_RETRIES=0")
		c.Spec.SDKMCPServers = []string{"probe"}
		c.Spec.Tools = append(c.Spec.Tools, "mcp__probe__echo")
		c.Spec.AllowedTools = []string{"mcp__probe__echo"}
		c.Spec.Hooks = map[string][]supervisor.HookMatcher{
			"PreToolUse": {{Matcher: "Read", HookCallbackIDs: []string{"hook_read"}}},
		}
		c.Handlers = probe.handlers
	})

	t.Run("control without a process", func(t *testing.T) {
		if _, err := s.Control(context.Background(), "set_model", map[string]any{"model": "x"}); !errors.Is(err, supervisor.ErrNotRunning) {
			t.Fatalf("control with no process: %v", err)
		}
	})
	t.Run("resume of a dash value", func(t *testing.T) {
		send(t, s, "hello")
		end := rec.WaitEnd(t, 60*time.Second)
		if end.Err == nil || strings.Contains(end.Err.Error(), "unknown option") || !strings.Contains(end.Err.Error(), `"-x"`) {
			t.Fatalf("resume of \"-x\": %v", end.Err)
		}
	})
	if t.Failed() {
		t.FailNow()
	}
	t.Run("resume failure starts fresh", func(t *testing.T) {
		s.Resume(missing)
		send(t, s, "[[say fresh start]]")
		end := rec.WaitEnd(t, 60*time.Second)
		if end.Err != nil {
			t.Fatalf("turn after failed resume: %v", end.Err)
		}
		if rec.Text() != "fresh start" {
			t.Fatalf("text = %q", rec.Text())
		}
		if n := rec.Notices(); len(n) != 1 {
			t.Fatalf("notices = %q, want 1", n)
		}
		if id := s.CLISessionID(); id == "" || id == missing {
			t.Fatalf("cli session id = %q", id)
		}
	})
	if t.Failed() {
		t.FailNow()
	}
	t.Run("dash prompt reaches the model", func(t *testing.T) {
		mu.Lock()
		defer mu.Unlock()
		if !strings.Contains(system, prompt) {
			t.Fatalf("the model's system prompt lacks %q: %s", prompt, system)
		}
	})
	t.Run("mcp and hook plumbing", func(t *testing.T) {
		send(t, s, `[[tool mcp__probe__echo {"text":"hi"}]]`)
		if end := rec.WaitEnd(t, 60*time.Second); end.Err != nil {
			t.Fatal(end.Err)
		}
		if got := rec.Text(); got != "RESULT<<echoed>>" {
			t.Fatalf("mcp tool result seen by the model: %q", got)
		}
		send(t, s, `[[tool Read {"file_path":"notes.md"}]]`)
		rec.WaitEnd(t, 60*time.Second)
		if got := rec.Text(); !strings.Contains(got, "probe says no") {
			t.Fatalf("hook denial not seen by the model: %q", got)
		}
		probe.mu.Lock()
		defer probe.mu.Unlock()
		if len(probe.hookTools) != 1 || probe.hookTools[0] != "hook_read:Read" {
			t.Fatalf("hook calls: %v", probe.hookTools)
		}
		if !strings.Contains(strings.Join(probe.mcpMethods, ","), "probe:tools/call") {
			t.Fatalf("mcp methods: %v", probe.mcpMethods)
		}
	})
	t.Run("model failure ends the turn", func(t *testing.T) {
		send(t, s, "[[status 400]]")
		end := rec.WaitEnd(t, 60*time.Second)
		if end.Msg == nil || !end.Msg.IsError {
			t.Fatalf("a failing model should end the turn with an error result: err=%v msg=%+v", end.Err, end.Msg)
		}
		send(t, s, "[[say still works]]")
		end = rec.WaitEnd(t, 60*time.Second)
		if end.Err != nil || rec.Text() != "still works" {
			t.Fatalf("after failure: %v %q", end.Err, rec.Text())
		}
	})
	t.Run("control requests", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := s.Control(ctx, "set_permission_mode", map[string]any{"mode": "default"}); err != nil {
			t.Fatalf("set_permission_mode: %v", err)
		}
		if _, err := s.Control(ctx, "set_model", map[string]any{"model": "claude-test-model"}); err != nil {
			t.Fatalf("set_model: %v", err)
		}
		// An unknown subtype gets the CLI's error response, matched by id.
		_, err := s.Control(ctx, "no_such_request", nil)
		var ce *supervisor.ControlError
		if !errors.As(err, &ce) {
			t.Fatalf("unknown request to the CLI: %v", err)
		}
		send(t, s, "[[say after controls]]")
		rec.WaitEnd(t, 30*time.Second)
		reqs := env.Model.Requests()
		if got := reqs[len(reqs)-1].Model; got != "claude-test-model" {
			t.Fatalf("model after set_model: %q", got)
		}
	})
	t.Run("the permission mode in effect", func(t *testing.T) {
		// The CLI answers set_permission_mode with the mode it put in
		// effect: "manual" is its other name for "default".
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		set := s.Settings()
		set.PermissionMode = "manual"
		if err := s.Configure(ctx, set); err != nil {
			t.Fatalf("configure: %v", err)
		}
		if got := s.Settings().PermissionMode; got != "default" {
			t.Fatalf("the session's permission mode is %q, want the CLI's answer default", got)
		}
	})
	t.Run("big assistant text", func(t *testing.T) {
		const size = 2 << 20
		want := scriptedmodel.BigText(size)
		send(t, s, "[[big "+strconv.Itoa(size)+"]]")
		end := rec.WaitEnd(t, 120*time.Second)
		if end.Err != nil {
			t.Fatal(end.Err)
		}
		if got := rec.Text(); got != want {
			t.Fatalf("streamed text: %d bytes, intact=%v", len(got), got == want)
		}
		// The whole message also arrives as one assistant line.
		n := rec.Count(func(ev supervisor.Event) bool {
			return ev.Kind == supervisor.EventCLI && ev.Msg.Type == "assistant" && len(ev.Msg.Raw) > size
		})
		if n != 1 {
			t.Fatalf("assistant lines over %d bytes: %d", size, n)
		}
		if end.Msg.Result != want {
			t.Fatalf("result text differs (%d bytes)", len(end.Msg.Result))
		}
	})
}
