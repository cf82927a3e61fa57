package relay_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/httpapi/httpapitest"
	"github.com/majorhq/major/supervisor"
)

// TestConversationOutlivesItsProcess: whatever ends a session's CLI
// process, the next message resumes the conversation in a new one, and
// the model sees what was said before. Step by step, on one session: the
// server restarts between turns (history, session list and event replay
// are as before, seq goes on); the CLI is killed mid-turn (the turn ends
// as crashed at once); the CLI stalls (only the stall watchdog ends the
// turn); the pool stops the idle process.
func TestConversationOutlivesItsProcess(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	h := newHarness(t, harnessOpts{stateDir: state})
	_, evs := h.ChatStream(t, "sebastian", "", httpapitest.JSONBody(map[string]any{"message": "my cat is called Miso"}))
	sid := httpapitest.Str(evs[len(evs)-1], "session_id")
	_, before := h.Call(t, "GET", "/api/claude/history?session_id="+sid, "sebastian", nil)
	a, closeA := h.Attach(t, sid, "")
	allBefore := httpapitest.Until(t, a, "done")
	closeA()
	h.shutdown()

	// A new server on the same state and vault. Its stall limit is long
	// enough that a CLI slowed by a busy machine is not taken for stalled.
	pool := supervisor.NewPool(supervisor.PoolConfig{Max: 4, IdleTimeout: time.Second, Logger: zerolog.Nop()})
	defer pool.Close()
	h2 := newHarness(t, harnessOpts{stateDir: state, env: h.env, pool: pool, stall: 15 * time.Second})
	recall := func(t *testing.T) string {
		t.Helper()
		_, evs := h2.ChatStream(t, "sebastian", "", httpapitest.JSONBody(map[string]any{"message": "[[recall]]", "session_id": sid}))
		return httpapitest.StreamText(evs)
	}

	t.Run("restart between turns", func(t *testing.T) {
		_, after := h2.Call(t, "GET", "/api/claude/history?session_id="+sid, "sebastian", nil)
		if httpapitest.JSONBody(after) != httpapitest.JSONBody(before) {
			t.Fatalf("history changed across restart:\n%v\n%v", before, after)
		}
		code, list := h2.Call(t, "GET", "/api/claude/sessions", "sebastian", nil)
		if code != 200 || !strings.Contains(httpapitest.JSONBody(list), sid) || !strings.Contains(httpapitest.JSONBody(list), "my cat is called Miso") {
			t.Fatalf("sessions after restart: %v", list)
		}
		b, closeB := h2.Attach(t, sid, "after=2")
		replay := httpapitest.Until(t, b, "done")
		closeB()
		if len(replay) != len(allBefore)-2 || httpapitest.JSONBody(replay[0]) != httpapitest.JSONBody(allBefore[2]) {
			t.Fatalf("replay after restart: %d events, want %d", len(replay), len(allBefore)-2)
		}
		// The next message resumes the CLI conversation.
		if got := recall(t); got != "HISTORY: my cat is called Miso | [[recall]]" {
			t.Fatalf("after restart the model saw %q", got)
		}
		c, closeC := h2.Attach(t, sid, "types=turn_start")
		defer closeC()
		starts := httpapitest.Until(t, c, "turn_start")
		starts = append(starts, httpapitest.Until(t, c, "turn_start")...)
		if seqOf(t, starts[1]) <= seqOf(t, allBefore[len(allBefore)-1]) {
			t.Fatal("seq went backwards after restart")
		}
	})

	t.Run("killed mid-turn", func(t *testing.T) {
		a, closeA := h2.Attach(t, sid, "types=text,error,done")
		defer closeA()
		h2.Call(t, "POST", "/api/claude/sessions/"+sid+"/messages", "sebastian", map[string]any{"message": "[[slow 100 50]]"})
		httpapitest.Until(t, a, "text")
		chat, _ := h2.sessions.Get(sid, "sebastian")
		_ = syscall.Kill(chat.CLI().(*supervisor.CLI).Pid(), syscall.SIGKILL)
		// The turn ends as crashed, not after its 100 ticks.
		evs := httpapitest.Until(t, a, "error")
		if e := evs[len(evs)-1]; httpapitest.Str(e, "kind") != "crashed" ||
			httpapitest.Str(e, "message") != "The assistant crashed; your next message continues the conversation." {
			t.Fatalf("after kill -9: %v", evs[len(evs)-1])
		}
		// The killed turn itself may or may not be in the history.
		if got := recall(t); !strings.HasPrefix(got, "HISTORY: my cat is called Miso | [[recall]] | ") || !strings.HasSuffix(got, "[[recall]]") {
			t.Fatalf("after kill the model saw %q", got)
		}
	})

	t.Run("stalled", func(t *testing.T) {
		// [[hang]] never answers: only the stall detection ends this stream.
		_, evs := h2.ChatStream(t, "sebastian", "", httpapitest.JSONBody(map[string]any{"message": "[[hang]]", "session_id": sid}))
		httpapitest.CheckCompat(t, evs)
		last := evs[len(evs)-1]
		if httpapitest.Str(last, "type") != "error" || !strings.Contains(httpapitest.Str(last, "message"), "stopped responding") {
			t.Fatalf("stalled turn ended with %v", last)
		}
		h2.assertUsable(t, sid)
	})

	t.Run("idle process stopped", func(t *testing.T) {
		deadline := time.Now().Add(10 * time.Second)
		for pool.Live() != 0 {
			if time.Now().After(deadline) {
				t.Fatal("idle process not stopped")
			}
			time.Sleep(20 * time.Millisecond)
		}
		if got := recall(t); !strings.HasPrefix(got, "HISTORY: my cat is called Miso | ") || !strings.HasSuffix(got, "[[say still usable]] | [[recall]]") {
			t.Fatalf("after idle stop the model saw %q", got)
		}
	})
}

// A server that crashed mid-turn leaves the turn open in its log, and a
// torn line at its end: the restarted server closes the turn with an error
// saying so, and the session takes the next message (on the fake CLI: what
// a real CLI does when its process is gone is TestKilledCLIMidTurnThenUsable's).
func TestCrashMidTurnIsClosedOnRestart(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	h := newFakeHarness(t, harnessOpts{stateDir: state})
	id := h.NewSession(t)
	a, closeA := h.Attach(t, id, "types=text")
	h.Call(t, "POST", "/api/claude/sessions/"+id+"/messages", "sebastian", map[string]any{"message": "a long answer, please"})
	h.fake(t, id).Stream("the first words ")
	httpapitest.Until(t, a, "text")
	closeA()
	// A crash: the log is left mid-turn, and a torn line at its end.
	logPath := filepath.Join(state, "persons", "sebastian", "sessions", id, "events.ndjson")
	waitLogged(t, logPath, `"type":"text"`)
	f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	copyDir(t, state, state+"-crash")
	_, _ = f.WriteString(`{"t":1,"e":{"seq":999,"type":"te`)
	f.Close()
	copyFile(t, logPath, filepath.Join(state+"-crash", "persons", "sebastian", "sessions", id, "events.ndjson"))
	h.shutdown()

	h2 := newFakeHarness(t, harnessOpts{stateDir: state + "-crash"})
	b, closeB := h2.Attach(t, id, "types=turn_start,text,error,done")
	defer closeB()
	evs := httpapitest.Until(t, b, "error")
	if !strings.Contains(httpapitest.Str(evs[len(evs)-1], "message"), "restarted during this turn") {
		t.Fatalf("crashed turn closed with %v", evs[len(evs)-1])
	}
	h2.assertUsable(t, id)
}

// With one process slot, a second session's turn stops the first
// session's idle process, and going back to the first session resumes
// its conversation in a new process.
func TestEvictionWithOneSlot(t *testing.T) {
	t.Parallel()
	pool := supervisor.NewPool(supervisor.PoolConfig{Max: 1, SlotWait: 20 * time.Second, Logger: zerolog.Nop()})
	defer pool.Close()
	h := newHarness(t, harnessOpts{pool: pool})
	var ids []string
	for i, word := range []string{"alpha", "beta"} {
		_, evs := h.ChatStream(t, "sebastian", "", httpapitest.JSONBody(map[string]any{"message": word}))
		httpapitest.CheckCompat(t, evs)
		ids = append(ids, httpapitest.Str(evs[len(evs)-1], "session_id"))
		if n := pool.Live(); n != 1 {
			t.Fatalf("after session %d: %d live processes, want 1", i, n)
		}
	}
	// Back to the first session: its process was evicted; it resumes.
	_, evs := h.ChatStream(t, "sebastian", "", httpapitest.JSONBody(map[string]any{"message": "[[recall]]", "session_id": ids[0]}))
	if got := httpapitest.StreamText(evs); got != "HISTORY: alpha | [[recall]]" {
		t.Fatalf("evicted session resumed with %q", got)
	}
}

// With the only slot held by a running turn, another turn waits and then
// gets a clear 503, and its session stays idle.
func TestTurnWithoutAFreeSlotIsRefused(t *testing.T) {
	t.Parallel()
	pool := supervisor.NewPool(supervisor.PoolConfig{Max: 1, SlotWait: 200 * time.Millisecond, Logger: zerolog.Nop()})
	defer pool.Close()
	h2 := newFakeHarness(t, harnessOpts{pool: pool})
	busy := h2.NewSession(t)
	if code, out := h2.Call(t, "POST", "/api/claude/sessions/"+busy+"/messages", "sebastian", map[string]any{"message": "[[hang]]"}); code != http.StatusAccepted {
		t.Fatalf("busy turn: %d %v", code, out)
	}
	other := h2.NewSession(t)
	code, out := h2.Call(t, "POST", "/api/claude/sessions/"+other+"/messages", "sebastian", map[string]any{"message": "hi"})
	if code != http.StatusServiceUnavailable || !strings.Contains(out["error"].(string), "busy") {
		t.Fatalf("turn with no free slot: %d %v", code, out)
	}
	if st := stateOf(t, h2, other); st != "idle" {
		t.Fatalf("refused session state %s", st)
	}
}

func stateOf(tb testing.TB, h *harness, id string) string {
	for _, s := range h.sessions.List("sebastian") {
		if s.ID == id {
			return s.State
		}
	}
	tb.Fatalf("no session %s", id)
	return ""
}

func TestOrphansCleaned(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cmd := startGroup(t, "/bin/sleep", "60")
	if err := os.WriteFile(filepath.Join(dir, itoa(cmd.Process.Pid)), []byte("/bin/sleep\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A record whose pid now runs something else is not killed.
	other := startGroup(t, "/bin/sh", "-c", "sleep 60")
	if err := os.WriteFile(filepath.Join(dir, itoa(other.Process.Pid)), []byte("/usr/bin/claude\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if n := supervisor.CleanOrphans(dir, zerolog.Nop()); n != 1 {
		t.Fatalf("killed %d groups, want 1", n)
	}
	if err := cmd.Wait(); err == nil {
		t.Fatal("orphan still ran")
	}
	if err := syscall.Kill(other.Process.Pid, 0); errors.Is(err, syscall.ESRCH) {
		t.Fatal("an unrelated process was killed")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("records left: %d", len(entries))
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// startGroup starts a command in its own process group, killed at cleanup.
func startGroup(tb testing.TB, name string, args ...string) *exec.Cmd {
	tb.Helper()
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_, _ = cmd.Process.Wait()
	})
	return cmd
}

func copyFile(tb testing.TB, from, to string) {
	tb.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o700); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		tb.Fatal(err)
	}
}

// copyDir copies a state directory as it is on disk at this moment, which
// is what a crashed server leaves.
// waitLogged waits until the session log at path holds want: the log
// writer writes an event shortly after clients see it, and a crash
// before that loses it.
func waitLogged(tb testing.TB, path, want string) {
	tb.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	timeout := time.NewTimer(60 * time.Second)
	defer timeout.Stop()
	for {
		if b, _ := os.ReadFile(path); strings.Contains(string(b), want) {
			return
		}
		select {
		case <-tick.C:
		case <-timeout.C:
			tb.Fatalf("%s not in %s within 60s", want, path)
		}
	}
}

func copyDir(tb testing.TB, from, to string) {
	tb.Helper()
	err := filepath.WalkDir(from, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		copyFile(tb, path, filepath.Join(to, rel))
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
}

func TestPendingQuestionClosedAfterCrash(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	h := newFakeHarness(t, harnessOpts{stateDir: state})
	id := h.NewSession(t)
	a, closeA := h.Attach(t, id, "types=question")
	h.Call(t, "POST", "/api/claude/sessions/"+id+"/messages", "sebastian", map[string]any{"message": "[[ask]]"})
	reqID, _ := waitAsk(t, a, "question")
	closeA()
	waitLogged(t, filepath.Join(state, "persons", "sebastian", "sessions", id, "events.ndjson"), reqID)
	copyDir(t, state, state+"-crash") // what a crash leaves on disk
	h.shutdown()

	h2 := newFakeHarness(t, harnessOpts{stateDir: state + "-crash"})
	b, closeB := h2.Attach(t, id, "types=question,question_answered,error")
	defer closeB()
	evs := httpapitest.Until(t, b, "error")
	if len(evs) != 3 || httpapitest.Str(evs[1], "type") != "question_answered" || httpapitest.Str(evs[1], "request_id") != reqID || httpapitest.Str(evs[1], "outcome") != "cancelled" {
		t.Fatalf("after the crash: %v", evs)
	}
	if code, _ := h2.Call(t, "POST", "/api/claude/sessions/"+id+"/answer", "sebastian", map[string]any{"request_id": reqID, "answers": map[string]string{"Which color?": "Red"}}); code != http.StatusNotFound {
		t.Fatalf("answering a question of a dead turn: %d", code)
	}
}

func TestShutdownRefusesNewTurns(t *testing.T) {
	t.Parallel()
	h := newFakeHarness(t, harnessOpts{})
	id := h.NewSession(t)
	h.sessions.Shutdown(context.Background())
	code, out := h.Call(t, "POST", "/api/claude/sessions/"+id+"/messages", "sebastian", map[string]any{"message": "hi"})
	if code != http.StatusServiceUnavailable || !strings.Contains(out["error"].(string), "shutting down") {
		t.Fatalf("message during shutdown: %d %v", code, out)
	}
	status, _ := h.ChatStream(t, "sebastian", "", httpapitest.JSONBody(map[string]any{"message": "hi"}))
	if status != http.StatusServiceUnavailable {
		t.Fatalf("chat-stream during shutdown: %d", status)
	}
}

// A turn the server's shutdown ends says that the server restarted (as
// after a crash), not that it was interrupted; an interrupt the person
// asks for before still reads "Interrupted".
func TestShutdownEndsATurnAsARestart(t *testing.T) {
	t.Parallel()
	h := newFakeHarness(t, harnessOpts{})
	id := h.NewSession(t)
	a, closeA := h.Attach(t, id, "types=turn_start,text,status,done,error")
	defer closeA()
	h.Call(t, "POST", "/api/claude/sessions/"+id+"/messages", "sebastian", map[string]any{"message": "one"})
	cli := h.fake(t, id)
	cli.Stream("part of an answer")
	httpapitest.Until(t, a, "text")
	if code, out := h.Call(t, "POST", "/api/claude/sessions/"+id+"/interrupt", "sebastian", nil); code != http.StatusOK {
		t.Fatalf("interrupt: %d %v", code, out)
	}
	evs := httpapitest.Until(t, a, "done")
	if got := httpapitest.Str(evs[len(evs)-2], "message"); got != "Interrupted" {
		t.Fatalf("the person's interrupt reads %q", got)
	}

	h.Call(t, "POST", "/api/claude/sessions/"+id+"/messages", "sebastian", map[string]any{"message": "two"})
	cli.Stream("more of an answer")
	httpapitest.Until(t, a, "text")
	h.sessions.Shutdown(context.Background())
	evs = httpapitest.Until(t, a, "error")
	end := evs[len(evs)-1]
	if httpapitest.Str(end, "kind") != "restarted" || !strings.Contains(httpapitest.Str(end, "message"), "The server restarted") {
		t.Fatalf("the shutdown ended the turn with %v", end)
	}
	for _, e := range evs {
		if httpapitest.Str(e, "message") == "Interrupted" {
			t.Fatalf("the shutdown's end reads Interrupted: %v", evs)
		}
	}
}

// The turn-end hook runs before a turn's end reaches the clients, with its
// status line first; a message that starts when the CLI's turn is over,
// while the hook still runs, has its events wait behind that end.
func TestTurnEndHookRunsBeforeTheTurnsEnd(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var calls atomic.Int32
	h := newFakeHarness(t, harnessOpts{turnEnd: func(ctx context.Context, person, id string) string {
		if calls.Add(1) == 1 {
			<-release
		}
		return "synced for " + person
	}})
	id := h.NewSession(t)
	a, closeA := h.Attach(t, id, "types=turn_start,text,status,done,error")
	defer closeA()
	h.Call(t, "POST", "/api/claude/sessions/"+id+"/messages", "sebastian", map[string]any{"message": "one, please"})
	cli := h.fake(t, id)
	cli.Stream("one")
	httpapitest.Until(t, a, "text")
	// The second message waits for the first turn, and starts when the
	// CLI's turn is over while the hook still runs.
	if code, out := h.Call(t, "POST", "/api/claude/sessions/"+id+"/messages", "sebastian", map[string]any{"message": "[[say two]]"}); code != http.StatusAccepted || out["queued"] != true {
		t.Fatalf("second message: %d %v", code, out)
	}
	cli.Reply("")
	for deadline := time.Now().Add(30 * time.Second); len(cli.Sent()) < 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the second message did not go to the CLI while the hook ran")
		}
	}
	close(release)
	var got []string
	for _, ev := range append(httpapitest.Until(t, a, "done"), httpapitest.Until(t, a, "done")...) {
		got = append(got, httpapitest.Str(ev, "type")+":"+httpapitest.Str(ev, "delta")+httpapitest.Str(ev, "message"))
	}
	want := "status:synced for sebastian,done:,turn_start:[[say two]],text:two,status:synced for sebastian,done:"
	if strings.Join(got, ",") != want {
		t.Fatalf("events:\n got %s\nwant %s", strings.Join(got, ","), want)
	}
}
