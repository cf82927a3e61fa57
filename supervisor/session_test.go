package supervisor_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/clitest"
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
	deadline := time.Now().Add(3 * time.Second)
	for {
		err := syscall.Kill(-pgid, 0)
		if errors.Is(err, syscall.ESRCH) {
			return
		}
		if time.Now().After(deadline) {
			tb.Errorf("process group %d still has processes (kill 0: %v)", pgid, err)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func send(tb testing.TB, s *supervisor.CLI, text string) {
	tb.Helper()
	if err := s.Send(context.Background(), text); err != nil {
		tb.Fatalf("send %q: %v", text, err)
	}
}

func TestMultiTurnOneProcess(t *testing.T) {
	t.Parallel()
	env := clitest.New(t, nil)
	rec := clitest.NewRecorder()
	s := newSession(t, env, rec, nil)

	send(t, s, "[[say first answer]]")
	end := rec.WaitEnd(t, 60*time.Second)
	if end.Err != nil || end.Msg == nil || end.Msg.IsError {
		t.Fatalf("first turn: err=%v result=%+v", end.Err, end.Msg)
	}
	if got := rec.Text(); got != "first answer" {
		t.Fatalf("first turn text = %q", got)
	}
	pid := s.Pid()
	if pid == 0 {
		t.Fatal("no live process after the first turn")
	}
	if s.CLISessionID() == "" {
		t.Fatal("cli session id not captured")
	}

	send(t, s, "second message")
	rec.WaitEnd(t, 30*time.Second)
	send(t, s, "[[recall]]")
	end = rec.WaitEnd(t, 30*time.Second)
	if end.Err != nil {
		t.Fatal(end.Err)
	}
	if got, want := rec.Text(), "HISTORY: [[say first answer]] | second message | [[recall]]"; got != want {
		t.Fatalf("the model did not see the growing history:\n got %q\nwant %q", got, want)
	}
	if s.Pid() != pid {
		t.Fatalf("process changed between turns: %d then %d", pid, s.Pid())
	}
	if s.State() != supervisor.StateIdle {
		t.Fatalf("state after turns = %s", s.State())
	}
	// Events the supervisor does not model (system/status, ...) arrive
	// as the CLI wrote them.
	unmodelled := rec.Count(func(ev supervisor.Event) bool {
		return ev.Kind == supervisor.EventCLI && ev.Msg.Type == "system" && ev.Msg.Subtype == "status" &&
			strings.HasPrefix(string(ev.Msg.Raw), `{"type":"system","subtype":"status"`)
	})
	if unmodelled == 0 {
		t.Fatal("no system/status event passed through")
	}
}

func TestBusyWhileTurnRuns(t *testing.T) {
	t.Parallel()
	env := clitest.New(t, nil)
	rec := clitest.NewRecorder()
	s := newSession(t, env, rec, nil)
	send(t, s, "[[slow 10 100]]")
	if err := s.Send(context.Background(), "again"); !errors.Is(err, supervisor.ErrBusy) {
		t.Fatalf("second send during a turn: %v, want ErrBusy", err)
	}
	rec.WaitEnd(t, 60*time.Second)
}

func TestResumeInNewProcess(t *testing.T) {
	t.Parallel()
	env := clitest.New(t, nil)
	rec := clitest.NewRecorder()
	s := newSession(t, env, rec, nil)
	send(t, s, "remember the number 42")
	rec.WaitEnd(t, 60*time.Second)
	first := s.CLISessionID()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// A brand-new CLI, as after a server restart, knowing only the id.
	rec2 := clitest.NewRecorder()
	s2 := newSession(t, env, rec2, func(c *supervisor.CLIConfig) { c.CLISessionID = first })
	send(t, s2, "[[recall]]")
	end := rec2.WaitEnd(t, 60*time.Second)
	if end.Err != nil {
		t.Fatal(end.Err)
	}
	if got, want := rec2.Text(), "HISTORY: remember the number 42 | [[recall]]"; got != want {
		t.Fatalf("resumed history: got %q want %q", got, want)
	}
}

func TestInterruptSlowTurn(t *testing.T) {
	t.Parallel()
	env := clitest.New(t, nil)
	rec := clitest.NewRecorder()
	s := newSession(t, env, rec, nil)
	send(t, s, "[[slow 200 100]]")
	waitFor(t, 30*time.Second, func() bool { return strings.Contains(rec.Text(), "tick") })
	pid := s.Pid()

	if err := s.Interrupt(context.Background()); err != nil {
		t.Fatal(err)
	}
	end := rec.WaitEnd(t, 60*time.Second)
	if !end.Interrupted {
		t.Fatalf("turn end not marked interrupted: %+v", end)
	}
	if end.Msg == nil || end.Msg.TerminalReason != "aborted_streaming" {
		t.Fatalf("turn did not end with the CLI's result: err=%v msg=%+v", end.Err, end.Msg)
	}
	if s.Pid() != pid {
		t.Fatal("interrupt replaced the process; it should be in-band")
	}
	send(t, s, "[[say after interrupt]]")
	end = rec.WaitEnd(t, 30*time.Second)
	if end.Err != nil || rec.Text() != "after interrupt" {
		t.Fatalf("turn after interrupt: err=%v text=%q", end.Err, rec.Text())
	}
}

func TestKilledMidTurnResumes(t *testing.T) {
	t.Parallel()
	env := clitest.New(t, nil)
	rec := clitest.NewRecorder()
	s := newSession(t, env, rec, nil)
	send(t, s, "first words")
	rec.WaitEnd(t, 60*time.Second)

	send(t, s, "[[slow 200 100]]")
	waitFor(t, 30*time.Second, func() bool { return strings.Contains(rec.Text(), "tick") })
	pid := s.Pid()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	end := rec.WaitEnd(t, 60*time.Second)
	if !errors.Is(end.Err, supervisor.ErrProcessExited) {
		t.Fatalf("turn end after kill: %v", end.Err)
	}
	assertGroupGone(t, pid)

	send(t, s, "[[recall]]")
	end = rec.WaitEnd(t, 60*time.Second)
	if end.Err != nil {
		t.Fatal(end.Err)
	}
	// The completed turn is history; the killed one's message may or may
	// not have reached the CLI's transcript before the kill.
	if got := rec.Text(); !strings.HasPrefix(got, "HISTORY: first words | ") || !strings.HasSuffix(got, "[[recall]]") {
		t.Fatalf("history after respawn = %q", got)
	}
	if s.Pid() == pid || s.Pid() == 0 {
		t.Fatalf("expected a new process, got pid %d (old %d)", s.Pid(), pid)
	}
}

func TestBigAssistantText(t *testing.T) {
	t.Parallel()
	env := clitest.New(t, nil)
	rec := clitest.NewRecorder()
	s := newSession(t, env, rec, nil)
	const size = 5 << 20
	send(t, s, "[[big 5242880]]")
	end := rec.WaitEnd(t, 120*time.Second)
	if end.Err != nil {
		t.Fatal(end.Err)
	}
	got := rec.Text()
	if len(got) != size || got != scriptedmodel.BigText(size) {
		t.Fatalf("streamed text: %d bytes, intact=%v", len(got), got == scriptedmodel.BigText(size))
	}
	// The whole message also arrives as one assistant line of over 5 MB.
	n := rec.Count(func(ev supervisor.Event) bool {
		return ev.Kind == supervisor.EventCLI && ev.Msg.Type == "assistant" && len(ev.Msg.Raw) > size
	})
	if n != 1 {
		t.Fatalf("assistant lines over 5 MB: %d", n)
	}
	if end.Msg.Result != scriptedmodel.BigText(size) {
		t.Fatalf("result text differs (%d bytes)", len(end.Msg.Result))
	}
}

func TestResumeFailureStartsFresh(t *testing.T) {
	t.Parallel()
	env := clitest.New(t, nil)
	rec := clitest.NewRecorder()
	s := newSession(t, env, rec, func(c *supervisor.CLIConfig) {
		c.CLISessionID = "8d0a5ef4-5a1e-4b7e-9d55-000000000000"
	})
	send(t, s, "[[say fresh start]]")
	end := rec.WaitEnd(t, 60*time.Second)
	if end.Err != nil {
		t.Fatalf("turn after failed resume: %v", end.Err)
	}
	if rec.Text() != "fresh start" {
		t.Fatalf("text = %q", rec.Text())
	}
	notices := rec.Count(func(ev supervisor.Event) bool { return ev.Kind == supervisor.EventNotice })
	if notices != 1 {
		t.Fatalf("notices = %d, want 1", notices)
	}
	if id := s.CLISessionID(); id == "" || id == "8d0a5ef4-5a1e-4b7e-9d55-000000000000" {
		t.Fatalf("cli session id = %q", id)
	}
}

func TestModelFailureEndsTurn(t *testing.T) {
	t.Parallel()
	env := clitest.New(t, nil)
	rec := clitest.NewRecorder()
	s := newSession(t, env, rec, func(c *supervisor.CLIConfig) {
		c.Spec.Env = append(c.Spec.Env, "CLAUDE_CODE_MAX_RETRIES=0")
	})
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
}

func TestMCPAndHookPlumbing(t *testing.T) {
	t.Parallel()
	env := clitest.New(t, nil)
	rec := clitest.NewRecorder()
	var mu sync.Mutex
	var hookTools []string
	var mcpMethods []string
	s := newSession(t, env, rec, func(c *supervisor.CLIConfig) {
		c.Spec.SDKMCPServers = []string{"probe"}
		c.Spec.Tools = append(c.Spec.Tools, "mcp__probe__echo")
		c.Spec.AllowedTools = []string{"mcp__probe__echo"}
		c.Spec.Hooks = map[string][]supervisor.HookMatcher{
			"PreToolUse": {{Matcher: "Read", HookCallbackIDs: []string{"hook_read"}}},
		}
		c.Handlers = func(*supervisor.CLI) supervisor.Handlers {
			return supervisor.Handlers{
				HookCallback: func(ctx context.Context, req *supervisor.ControlRequest) (json.RawMessage, error) {
					var in supervisor.HookInput
					_ = json.Unmarshal(req.HookInput, &in)
					mu.Lock()
					hookTools = append(hookTools, req.CallbackID+":"+in.ToolName)
					mu.Unlock()
					return json.RawMessage(`{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"probe says no"}}`), nil
				},
				MCPMessage: func(ctx context.Context, server string, msg json.RawMessage) (json.RawMessage, error) {
					var m struct {
						ID     json.RawMessage `json:"id"`
						Method string          `json:"method"`
					}
					_ = json.Unmarshal(msg, &m)
					mu.Lock()
					mcpMethods = append(mcpMethods, server+":"+m.Method)
					mu.Unlock()
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
	})
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
	mu.Lock()
	defer mu.Unlock()
	if len(hookTools) != 1 || hookTools[0] != "hook_read:Read" {
		t.Fatalf("hook calls: %v", hookTools)
	}
	if strings.Join(mcpMethods, ",") == "" || !strings.Contains(strings.Join(mcpMethods, ","), "probe:tools/call") {
		t.Fatalf("mcp methods: %v", mcpMethods)
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

func TestControlRequestsToCLI(t *testing.T) {
	t.Parallel()
	env := clitest.New(t, nil)
	rec := clitest.NewRecorder()
	s := newSession(t, env, rec, nil)
	if _, err := s.Control(context.Background(), "set_model", map[string]any{"model": "x"}); !errors.Is(err, supervisor.ErrNotRunning) {
		t.Fatalf("control with no process: %v", err)
	}
	send(t, s, "[[say ready]]")
	rec.WaitEnd(t, 60*time.Second)
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
}

// TestDashValuesReachTheCLI starts the real CLI with values that start with
// dashes: each must reach the CLI as the value of its flag, never as a flag
// of its own. --resume takes an optional value, so a separate "-x" is read
// as an unknown option; joined to its flag, the CLI judges it as an id.
func TestDashValuesReachTheCLI(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var system string
	env := clitest.New(t, func(req scriptedmodel.Request) scriptedmodel.Reply {
		mu.Lock()
		system = string(req.System)
		mu.Unlock()
		return scriptedmodel.Script(req)
	})

	rec := clitest.NewRecorder()
	s := newSession(t, env, rec, func(c *supervisor.CLIConfig) { c.CLISessionID = "-x" })
	send(t, s, "hello")
	end := rec.WaitEnd(t, 60*time.Second)
	if end.Err == nil || strings.Contains(end.Err.Error(), "unknown option") || !strings.Contains(end.Err.Error(), `"-x"`) {
		t.Fatalf("resume of \"-x\": %v", end.Err)
	}

	rec = clitest.NewRecorder()
	const prompt = "--help -v You are a test assistant whose prompt starts with dashes."
	s = newSession(t, env, rec, func(c *supervisor.CLIConfig) {
		c.ID += "-prompt"
		c.Spec.SystemPrompt = prompt
	})
	if got := rec.Turn(t, s, "[[say fine]]"); got != "fine" {
		t.Fatalf("turn text %q", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(system, prompt) {
		t.Fatalf("the model's system prompt lacks %q: %s", prompt, system)
	}
}
