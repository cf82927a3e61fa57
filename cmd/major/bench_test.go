package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/majorhq/major/assembly"
	"github.com/majorhq/major/clitest"
	"github.com/majorhq/major/hooks"
	"github.com/majorhq/major/mcpserver"
	"github.com/majorhq/major/supervisor"
)

// The benchmarks here time the whole server on the real CLI and the
// scripted model against the same CLI driven bare, in the same loop, and
// report medians: x-baseline is the median server time over the median
// bare time. Run them with a fixed count of iterations (-benchtime=7x).

// bareCLI is the CLI as a program would drive it without the server, set
// up as a session's: its prompt, tools, isolation flags, file
// checkpointing and the same hooks and SDK MCP server registered, answered
// in-process at once (every hook lets the call through; the LinkedIn MCP
// server has no accounts). What the server adds is then what it does
// around the same CLI, not a CLI with less to do.
type bareCLI struct {
	proc *supervisor.Process
	msgs chan *supervisor.Message
	// cliTime is the last turn's duration as the CLI measured it (its
	// result's duration_ms).
	cliTime time.Duration
}

func startBare(tb testing.TB, env *clitest.Env) *bareCLI {
	tb.Helper()
	linkedIn := mcpserver.New(mcpserver.Config{Logger: zerolog.Nop()})
	spec := supervisor.Spec{
		Binary:         env.Binary,
		Env:            append(env.ChildEnv(), assembly.FileCheckpointing),
		SystemPrompt:   assembly.SystemPrompt(env.Vault("sebastian")),
		Tools:          append(append(append(assembly.FileTools(), assembly.WebTools()...), "AskUserQuestion", "ExitPlanMode"), mcpserver.QualifiedNames(mcpserver.ToolNames())...),
		AllowedTools:   append(assembly.FileTools(), assembly.WebTools()...),
		PermissionMode: assembly.PermissionMode,
		SDKMCPServers:  []string{mcpserver.ServerName},
		Hooks:          hooks.New(hooks.Config{VaultRoot: env.VaultRoot}).Matchers(),
		ExtraArgs:      hooks.IsolationArgs(),
	}
	c := &bareCLI{msgs: make(chan *supervisor.Message, 4096)}
	proc, err := supervisor.StartProcess(supervisor.ProcessConfig{
		Path: spec.Binary, Args: spec.Args(""), Dir: env.Vault("sebastian"), Env: spec.Env,
		OnMessage: func(m *supervisor.Message) { c.msgs <- m },
		Handlers: supervisor.Handlers{
			HookCallback: func(context.Context, *supervisor.ControlRequest) (json.RawMessage, error) {
				return json.RawMessage(`{}`), nil
			},
			MCPMessage: func(ctx context.Context, _ string, msg json.RawMessage) (json.RawMessage, error) {
				return linkedIn.HandleMessage(ctx, "sebastian", msg)
			},
		},
		Logger: zerolog.Nop(),
	})
	if err != nil {
		tb.Fatal(err)
	}
	c.proc = proc
	tb.Cleanup(func() { _ = proc.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := proc.Request(ctx, "initialize", map[string]any{"hooks": spec.Hooks, "sdkMcpServers": spec.SDKMCPServers}); err != nil {
		tb.Fatal(err)
	}
	return c
}

// turn sends text and returns the times from t0 (zero: the send) to the
// first text delta and to the result.
func (c *bareCLI) turn(tb testing.TB, text string, t0 time.Time) (first, end time.Duration) {
	tb.Helper()
	if t0.IsZero() {
		t0 = time.Now()
	}
	// With a message id and a priority, as the server sends it: the CLI
	// keeps a file checkpoint per identified message.
	if err := c.proc.SendUser(text, nil, uuid.NewString(), supervisor.PriorityLater); err != nil {
		tb.Fatal(err)
	}
	timeout := time.NewTimer(time.Minute)
	defer timeout.Stop()
	for {
		select {
		case m := <-c.msgs:
			if first == 0 && m.Type == "stream_event" && strings.Contains(string(m.Raw), `"text_delta"`) {
				first = time.Since(t0)
			}
			if m.Type == "result" {
				c.cliTime = time.Duration(m.DurationMS) * time.Millisecond
				return first, time.Since(t0)
			}
		case <-timeout.C:
			tb.Fatal("bare CLI: no result within a minute")
		}
	}
}

// chatTurn posts a chat-stream message and returns the session id, the time
// to the first text line and the time to done.
func (s *server) chatTurn(tb testing.TB, sessionID, text string) (id string, first, end time.Duration) {
	tb.Helper()
	body, _ := json.Marshal(map[string]string{"message": text, "session_id": sessionID})
	t0 := time.Now()
	resp := s.req(tb, "POST", "/api/claude/chat-stream", string(body))
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		var raw map[string]any
		_ = json.Unmarshal(lines.Bytes(), &raw)
		switch raw["type"] {
		case "text":
			if first == 0 {
				first = time.Since(t0)
			}
		case "done":
			id, _ = raw["session_id"].(string)
			return id, first, time.Since(t0)
		case "error":
			tb.Fatalf("turn failed: %s", lines.Text())
		}
	}
	tb.Fatalf("stream ended without done: %v", lines.Err())
	return "", 0, 0
}

// metric reads one value of the server's /metrics.
func (s *server) metric(tb testing.TB, name string) int {
	tb.Helper()
	for _, line := range strings.Split(readAll(tb, s.req(tb, "GET", "/metrics", "")), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			var n int
			fmt.Sscan(v, &n)
			return n
		}
	}
	tb.Fatalf("no metric %s", name)
	return 0
}

func (s *server) waitMetric(tb testing.TB, name string, want int) {
	tb.Helper()
	deadline := time.Now().Add(time.Minute)
	for s.metric(tb, name) != want {
		if time.Now().After(deadline) {
			tb.Fatalf("%s did not reach %d", name, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// reportRatio reports the medians of measured and baseline (in ms, under
// the names given) and their ratio as x-baseline.
func reportRatio(b *testing.B, measured, baseline []time.Duration, names ...string) {
	if len(names) < 2 {
		names = []string{"server", "bare"}
	}
	b.ReportMetric(float64(median(measured))/float64(median(baseline)), "x-baseline")
	b.ReportMetric(float64(median(measured).Microseconds())/1000, names[0]+"-ms")
	b.ReportMetric(float64(median(baseline).Microseconds())/1000, names[1]+"-ms")
}

// BenchmarkNewChatFirstText times a new chat's first text through the
// server (chat-stream without a session id, by a person whose client is
// open, so a started CLI waits for them) against a bare CLI started for
// that turn: start, initialize, the message, its first text delta.
func BenchmarkNewChatFirstText(b *testing.B) {
	s := start(b, "--warm-processes", "1")
	// The client lists the person's chats as it opens.
	readAll(b, s.req(b, "GET", "/api/claude/sessions", ""))
	var server, bare []time.Duration
	for b.Loop() {
		s.waitMetric(b, "major_claude_waiting_processes", 1)
		id, first, _ := s.chatTurn(b, "", "[[say hello]]")
		server = append(server, first)
		// The chat is done with: its process frees its slot.
		readAll(b, s.req(b, "POST", "/api/claude/clear", `{"session_id":"`+id+`"}`))

		t0 := time.Now()
		c := startBare(b, s.env)
		first, _ = c.turn(b, "[[say hello]]", t0)
		bare = append(bare, first)
		_ = c.proc.Close()
	}
	reportRatio(b, server, bare)
}

// BenchmarkTenthNewChat times a person's tenth new chat of a morning: on
// a server with the default flags (8 processes, 4 per person, one
// waiting process per active person), the person opens ten new chats a
// few seconds apart and keeps each one (its CLI stays, idle); the tenth
// chat's first text is timed against a bare claude started for that turn,
// as in NewChatFirstText (x-baseline). It also reports the first chat's
// first text (first-ms), and what the returning person pays: the first
// text of the first chat's next message, whose CLI was stopped to make
// room by then (returning-ms), against the same chat's message after
// that, its CLI running again (running-ms); x-returning is their ratio.
func BenchmarkTenthNewChat(b *testing.B) {
	const chats, gap = 10, 3 * time.Second
	var tenth, firsts, bare, returning, running []time.Duration
	for b.Loop() {
		s := start(b, "--warm-processes", "1")
		// The client lists the person's chats as it opens.
		readAll(b, s.req(b, "GET", "/api/claude/sessions", ""))
		s.waitMetric(b, "major_claude_waiting_processes", 1)
		var ids []string
		for i := range chats {
			if i > 0 {
				time.Sleep(gap)
			}
			id, first, _ := s.chatTurn(b, "", "[[say hello]]")
			ids = append(ids, id)
			switch i {
			case 0:
				firsts = append(firsts, first)
			case chats - 1:
				tenth = append(tenth, first)
			}
		}
		_, first, _ := s.chatTurn(b, ids[0], "[[say again]]")
		returning = append(returning, first)
		_, first, _ = s.chatTurn(b, ids[0], "[[say again]]")
		running = append(running, first)
		s.stop(b)

		t0 := time.Now()
		c := startBare(b, s.env)
		first, _ = c.turn(b, "[[say hello]]", t0)
		bare = append(bare, first)
		_ = c.proc.Close()
	}
	reportRatio(b, tenth, bare, "tenth", "bare")
	b.ReportMetric(float64(median(firsts).Microseconds())/1000, "first-ms")
	b.ReportMetric(float64(median(returning).Microseconds())/1000, "returning-ms")
	b.ReportMetric(float64(median(running).Microseconds())/1000, "running-ms")
	b.ReportMetric(float64(median(returning))/float64(median(running)), "x-returning")
}

// BenchmarkFollowUpTurn times a follow-up turn (message to done) of a chat
// whose CLI runs, through the server, against the same turn on a bare
// running CLI.
func BenchmarkFollowUpTurn(b *testing.B) {
	s := start(b, "--warm-processes", "0")
	id, _, _ := s.chatTurn(b, "", "[[say first]]")
	c := startBare(b, s.env)
	c.turn(b, "[[say first]]", time.Time{})
	var server, bare, serverOutside, bareOutside []time.Duration
	var seq int64
	s.lastCLITime(b, id, &seq)
	// The order alternates, so neither side always runs on the CPU the
	// other just warmed or loaded.
	serverTurn := func() {
		_, _, end := s.chatTurn(b, id, "[[say again]]")
		server = append(server, end)
		b.StopTimer()
		serverOutside = append(serverOutside, end-s.lastCLITime(b, id, &seq))
		b.StartTimer()
	}
	bareTurn := func() {
		_, end := c.turn(b, "[[say again]]", time.Time{})
		bare = append(bare, end)
		bareOutside = append(bareOutside, end-c.cliTime)
	}
	i := 0
	for b.Loop() {
		if i%2 == 0 {
			serverTurn()
			bareTurn()
		} else {
			bareTurn()
			serverTurn()
		}
		i++
	}
	reportRatio(b, server, bare)
	// The two processes' own times for the same turn vary by more than
	// the server adds (tens of percent from one run to the next), so the
	// time each turn spent outside its CLI (message to done, less the
	// result's duration_ms) is compared too: x-same-cli is the bare
	// median plus what the server adds to it, over the bare median.
	added := median(serverOutside) - median(bareOutside)
	b.ReportMetric(float64(added.Microseconds())/1000, "added-ms")
	b.ReportMetric(float64(median(bare)+added)/float64(median(bare)), "x-same-cli")
}

// lastCLITime reads session id's events after *seq up to the next turn's
// end and returns that turn's duration as its CLI measured it; *seq
// moves past it.
func (s *server) lastCLITime(tb testing.TB, id string, seq *int64) time.Duration {
	tb.Helper()
	resp := s.req(tb, "GET", fmt.Sprintf("/api/claude/sessions/%s/events?after=%d&types=done,error", id, *seq), "")
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		var ev struct {
			Seq   int64  `json:"seq"`
			Type  string `json:"type"`
			Usage *struct {
				DurationMS int64 `json:"duration_ms"`
			} `json:"usage"`
		}
		if json.Unmarshal(lines.Bytes(), &ev) != nil || (ev.Type != "done" && ev.Type != "error") {
			continue
		}
		*seq = ev.Seq
		if ev.Type == "error" || ev.Usage == nil {
			tb.Fatalf("turn without the CLI's figures: %s", lines.Text())
		}
		return time.Duration(ev.Usage.DurationMS) * time.Millisecond
	}
	tb.Fatalf("events ended without a turn's end: %v", lines.Err())
	return 0
}

// BenchmarkResumeFirstText times the first text of a message to a chat
// whose CLI was stopped for being idle (it resumes with --resume) against
// the next message of the same chat, whose CLI now runs: what keeping, or
// resuming ahead, a recently active chat's CLI would save.
func BenchmarkResumeFirstText(b *testing.B) {
	s := start(b, "--warm-processes", "0", "--idle-timeout", "1s")
	id, _, _ := s.chatTurn(b, "", "[[say first]]")
	var resumed, live []time.Duration
	for b.Loop() {
		s.waitMetric(b, "major_claude_processes", 0)
		_, first, _ := s.chatTurn(b, id, "[[say again]]")
		resumed = append(resumed, first)
		_, first, _ = s.chatTurn(b, id, "[[say again]]")
		live = append(live, first)
	}
	reportRatio(b, resumed, live, "resumed", "live")
}

// BenchmarkSandboxNewChat times a new chat's first text with its CLI in
// a sandbox against the same with --sandbox=off, both started cold for
// the turn (no process started ahead, so the sandbox's own start shows
// whole), alternating which goes first.
func BenchmarkSandboxNewChat(b *testing.B) {
	on := start(b, "--warm-processes", "0")
	off := start(b, "--warm-processes", "0", "--sandbox", "off")
	var boxed, bare []time.Duration
	turn := func(s *server, into *[]time.Duration) {
		id, first, _ := s.chatTurn(b, "", "[[say hello]]")
		*into = append(*into, first)
		readAll(b, s.req(b, "POST", "/api/claude/clear", `{"session_id":"`+id+`"}`))
	}
	i := 0
	for b.Loop() {
		if i%2 == 0 {
			turn(on, &boxed)
			turn(off, &bare)
		} else {
			turn(off, &bare)
			turn(on, &boxed)
		}
		i++
	}
	reportRatio(b, boxed, bare, "sandbox", "nosandbox")
}

// BenchmarkSandboxFollowUp times a follow-up turn (message to done) of a
// chat whose CLI runs in a sandbox against the same with --sandbox=off.
func BenchmarkSandboxFollowUp(b *testing.B) {
	on := start(b, "--warm-processes", "0")
	off := start(b, "--warm-processes", "0", "--sandbox", "off")
	onID, _, _ := on.chatTurn(b, "", "[[say first]]")
	offID, _, _ := off.chatTurn(b, "", "[[say first]]")
	var boxed, bare []time.Duration
	turn := func(s *server, id string, into *[]time.Duration) {
		_, _, end := s.chatTurn(b, id, "[[say again]]")
		*into = append(*into, end)
	}
	i := 0
	for b.Loop() {
		if i%2 == 0 {
			turn(on, onID, &boxed)
			turn(off, offID, &bare)
		} else {
			turn(off, offID, &bare)
			turn(on, onID, &boxed)
		}
		i++
	}
	reportRatio(b, boxed, bare, "sandbox", "nosandbox")
}
