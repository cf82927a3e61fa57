package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/majorhq/major/internal/standin"
	"github.com/majorhq/major/relay"
	"github.com/majorhq/major/sessionstore"
	"github.com/majorhq/major/supervisor"
)

// BenchmarkIdleSessionsRSS measures the resident memory of the server
// binary (built for the benchmark, the stand-in CLI as its claude,
// --sandbox=off) once it serves a state directory of 2,000 idle sessions
// (200 with -short), each with a history of three turns (a tool call and
// its result, 50 text deltas), against the same binary on an empty state
// directory, in alternating starts. x-baseline is the median RSS with the
// sessions over the median without; KB/session is their difference per
// session.
func BenchmarkIdleSessionsRSS(b *testing.B) {
	n := 2000
	if testing.Short() {
		n = 200
	}
	bin := buildServer(b)
	claude := standin.Build(b)
	full, empty := b.TempDir(), b.TempDir()
	writeIdleSessions(b, filepath.Join(full, "state"), n, 3)
	var with, without []float64
	for b.Loop() {
		without = append(without, serverRSS(b, bin, claude, empty, 0))
		with = append(with, serverRSS(b, bin, claude, full, n))
	}
	mw, mo := medianOf(with), medianOf(without)
	b.ReportMetric(mw/1024, "rss-MiB")
	b.ReportMetric(mo/1024, "empty-rss-MiB")
	b.ReportMetric((mw-mo)/float64(n), "KB/session")
	b.ReportMetric(mw/mo, "x-baseline")
}

func medianOf(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// buildServer compiles this program into a directory of the benchmark's.
func buildServer(tb testing.TB) string {
	tb.Helper()
	bin := filepath.Join(tb.TempDir(), "major")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// writeIdleSessions writes n sessions of turns turns each into stateDir,
// as the server keeps them: one made through a session of the relay, the
// others copies of it under their own ids, half of them petra's.
func writeIdleSessions(tb testing.TB, stateDir string, n, turns int) {
	tb.Helper()
	st, err := sessionstore.New(stateDir, zerolog.Nop())
	if err != nil {
		tb.Fatal(err)
	}
	sessions, err := relay.NewRegistry(relay.RegistryConfig{
		Launcher: relay.LauncherFunc(func(p relay.SessionParams) relay.CLI {
			return supervisor.NewCLI(supervisor.CLIConfig{ID: p.ID, Person: p.Person, Sink: p.Sink})
		}),
		Store: st, Logger: zerolog.Nop(),
	})
	if err != nil {
		tb.Fatal(err)
	}
	c, err := sessions.GetOrCreate("", "sebastian")
	if err != nil {
		tb.Fatal(err)
	}
	for turn := range turns {
		for _, ev := range historyTurn(tb, turn) {
			c.Publish(ev)
		}
	}
	sessions.Close()
	events, err := os.ReadFile(st.LogPath(c.Person, c.ID))
	if err != nil {
		tb.Fatal(err)
	}
	var m map[string]any
	if b, err := os.ReadFile(filepath.Join(st.SessionDir(c.Person, c.ID), "meta.json")); err != nil || json.Unmarshal(b, &m) != nil {
		tb.Fatalf("template index entry: %v", err)
	}
	for i := 1; i < n; i++ {
		id := uuid.NewString()
		m["id"] = id
		person := []string{"sebastian", "petra"}[i%2]
		m["person"] = person
		if err := os.MkdirAll(st.SessionDir(person, id), 0o700); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(st.LogPath(person, id), events, 0o600); err != nil {
			tb.Fatal(err)
		}
		if err := st.SaveIndex(person, id, m); err != nil {
			tb.Fatal(err)
		}
	}
}

// historyTurn is one turn of a history as the CLI streams it.
func historyTurn(tb testing.TB, turn int) []supervisor.Event {
	tb.Helper()
	msg := func(v map[string]any) supervisor.Event {
		v["session_id"] = "9f0c1d2e-3a4b-4c5d-8e9f-0a1b2c3d4e5f"
		v["uuid"] = uuid.NewString()
		raw, _ := json.Marshal(v)
		m, err := supervisor.DecodeMessage(raw)
		if err != nil {
			tb.Fatal(err)
		}
		return supervisor.Event{Kind: supervisor.EventCLI, Msg: m, Time: time.Now()}
	}
	now := time.Now()
	evs := []supervisor.Event{
		{Kind: supervisor.EventTurnStart, Text: fmt.Sprintf("question %d: what do my notes say about the garden?", turn), Time: now},
		msg(map[string]any{"type": "system", "subtype": "init", "cwd": ".", "model": "claude-sonnet-4-5",
			"tools": []string{"Read", "Write", "Edit", "Glob", "Grep", "WebFetch", "WebSearch"}}),
		msg(map[string]any{"type": "assistant", "message": map[string]any{"id": fmt.Sprint("msg_a", turn), "role": "assistant",
			"content": []map[string]any{{"type": "tool_use", "id": fmt.Sprint("toolu_", turn), "name": "Read",
				"input": map[string]string{"file_path": "notes/garden.md"}}}}}),
		msg(map[string]any{"type": "user", "message": map[string]any{"role": "user",
			"content": []map[string]any{{"type": "tool_result", "tool_use_id": fmt.Sprint("toolu_", turn),
				"content": strings.Repeat("Water the roses twice a week.\n", 20)}}}}),
		msg(map[string]any{"type": "stream_event", "parent_tool_use_id": nil, "event": map[string]any{"type": "message_start",
			"message": map[string]any{"id": fmt.Sprint("msg_b", turn), "role": "assistant"}}}),
	}
	words := strings.Fields(strings.Repeat("your garden note says to water the roses twice a week and to cut them back in march ", 8))
	var answer strings.Builder
	for i := range 50 {
		w := words[i%len(words)] + " "
		answer.WriteString(w)
		evs = append(evs, msg(map[string]any{"type": "stream_event", "parent_tool_use_id": nil, "event": map[string]any{
			"type": "content_block_delta", "index": 0, "delta": map[string]string{"type": "text_delta", "text": w}}}))
	}
	result := msg(map[string]any{"type": "result", "subtype": "success", "result": answer.String(), "total_cost_usd": 0.01,
		"duration_ms": 1200, "num_turns": 2})
	return append(evs,
		msg(map[string]any{"type": "assistant", "message": map[string]any{"id": fmt.Sprint("msg_b", turn), "role": "assistant",
			"content": []map[string]any{{"type": "text", "text": answer.String()}}}}),
		result,
		supervisor.Event{Kind: supervisor.EventTurnEnd, Msg: result.Msg, Time: now.Add(time.Second)},
	)
}

// serverRSS starts the server binary on dir's state directory, waits
// until it serves (and logged that it restored want sessions), and
// returns its resident memory in KiB, then stops it.
func serverRSS(tb testing.TB, bin, claude, dir string, want int) float64 {
	tb.Helper()
	vault := filepath.Join(dir, "vault")
	for _, p := range []string{"sebastian", "petra"} {
		if err := os.MkdirAll(filepath.Join(vault, p), 0o700); err != nil {
			tb.Fatal(err)
		}
	}
	auth := filepath.Join(dir, "auth.json")
	if err := os.WriteFile(auth, []byte(`{"tokens": {"t": ["sebastian", "petra"]}}`), 0o600); err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "--addr", "127.0.0.1:0", "--vault-root", vault, "--state-dir", filepath.Join(dir, "state"),
		"--config-dir", filepath.Join(dir, "config"), "--claude", claude, "--auth-file", auth, "--sandbox=off",
		"--warm-processes", "0", "--log-level", "info")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	// A server that never says it serves is stopped, and the benchmark
	// fails below.
	stuck := time.AfterFunc(2*time.Minute, func() { _ = cmd.Process.Kill() })
	defer stuck.Stop()
	restored, serving := 0, false
	lines := bufio.NewScanner(out)
	lines.Buffer(nil, 1<<20)
	for lines.Scan() {
		var l struct {
			Message  string `json:"message"`
			Sessions int    `json:"sessions"`
		}
		_ = json.Unmarshal(lines.Bytes(), &l)
		if l.Message == "sessions restored" {
			restored = l.Sessions
		}
		if l.Message == "major is serving" {
			serving = true
			break
		}
	}
	if !serving {
		tb.Fatal("the server stopped or hung before it served")
	}
	if restored != want {
		tb.Fatalf("the server restored %d sessions, want %d", restored, want)
	}
	go func() {
		for lines.Scan() {
		}
	}()
	time.Sleep(time.Second) // what the start left running settles
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err != nil {
				tb.Fatal(err)
			}
			return kb
		}
	}
	tb.Fatal("no VmRSS")
	return 0
}
