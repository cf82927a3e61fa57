package main

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/majorhq/major/vault/vaulttest"
)

func gitIn(tb testing.TB, dir string, args ...string) string {
	tb.Helper()
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput()
	if err != nil {
		tb.Fatalf("git %v: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// compatLines decodes a chat-stream answer into its events, pings left out.
func compatLines(tb testing.TB, body string) []map[string]any {
	tb.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(body), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			tb.Fatalf("line %q: %v", line, err)
		}
		if m["type"] != "ping" {
			out = append(out, m)
		}
	}
	return out
}

// TestTurnEndGitInTheVault: the server's state lives in a dot-folder of the
// vault repository, and the vault tracks a remote that does not exist.
//   - a turn's note is committed locally, and the failed push is reported
//     in the turn in words that name no path, remote or git command;
//   - the state directory is accepted there, excluded from git, and no
//     commit carries any of it;
//   - after a restart the finished turn stays finished.
func TestTurnEndGitInTheVault(t *testing.T) {
	t.Parallel()
	s := start(t)
	s.stop(t)
	state := filepath.Join(s.env.VaultRoot, ".major-state")
	s = launch(t, s.env, s.li, state, withArg(s.args, "--state-dir", state), s.environ)
	// The vault tracks a remote that does not exist: every push fails.
	gitIn(t, s.env.VaultRoot, "remote", "add", "origin", filepath.Join(t.TempDir(), "gone.git"))
	gitIn(t, s.env.VaultRoot, "config", "branch.main.remote", "origin")
	gitIn(t, s.env.VaultRoot, "config", "branch.main.merge", "refs/heads/main")

	msg := `{"message":"[[tool Write {\"file_path\":\"note.md\",\"content\":\"kept\\n\"}]]"}`
	evs := compatLines(t, readAll(t, s.req(t, "POST", "/api/claude/chat-stream", msg)))
	last := evs[len(evs)-1]
	if last["type"] != "done" {
		t.Fatalf("turn ended with %v", last)
	}
	status := evs[len(evs)-2]
	if status["type"] != "status" || !strings.Contains(status["message"].(string), "sending them to the shared repository failed") {
		t.Fatalf("event before done: %v\nall: %v", status, evs)
	}
	// git's own words name the server's paths and the remote's address
	// (which may carry credentials): they stay in the log.
	for _, secret := range []string{"gone.git", s.env.VaultRoot, "fatal", "git push"} {
		if strings.Contains(status["message"].(string), secret) {
			t.Fatalf("the status shows the person %q: %v", secret, status)
		}
	}
	if got := gitIn(t, s.env.VaultRoot, "log", "--format=%s", "--", "sebastian/note.md"); got != "sebastian: 1 note changed (note.md)" {
		t.Fatalf("the note was not committed locally: %q", got)
	}
	id := last["session_id"].(string)
	s.stop(t)

	// After a restart the finished turn stays finished: no "server
	// restarted" error is added to it.

	// The state stays in the vault's dot-folder, and out of git.
	if _, err := os.Stat(filepath.Join(state, "persons", "sebastian", "sessions")); err != nil {
		t.Fatalf("state not kept in %s: %v", state, err)
	}
	if out, err := exec.Command("git", "-C", s.env.VaultRoot, "check-ignore", "-q", ".major-state/persons").CombinedOutput(); err != nil {
		t.Fatalf("state dir not excluded from git: %v %s", err, out)
	}
	gitIn(t, s.env.VaultRoot, "add", "-A")
	staged := gitIn(t, s.env.VaultRoot, "diff", "--cached", "--name-only")
	logged := gitIn(t, s.env.VaultRoot, "log", "--all", "--name-only", "--format=")
	if strings.Contains(staged+logged, ".major-state") {
		t.Fatalf("state reached git:\nstaged %s\nlog %s", staged, logged)
	}

	s2 := restart(t, s)
	resp := s2.req(t, "GET", "/api/claude/sessions/"+id+"/events?types=turn_start,status,done,error", "")
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var types []string
	for sc.Scan() {
		var e struct{ Type, Message string }
		_ = json.Unmarshal(sc.Bytes(), &e)
		if e.Type == "ping" {
			break // replay done: the stream went quiet
		}
		if e.Type == "error" {
			t.Fatalf("restart added an error to a finished turn: %s", e.Message)
		}
		types = append(types, e.Type)
	}
	if got := strings.Join(types, ","); got != "turn_start,status,status,status,done" {
		t.Fatalf("events after restart: %s", got)
	}
}

// tracks makes the vault's branch track remote (a URL or a path) as
// origin.
func tracks(tb testing.TB, vault, remote string) {
	tb.Helper()
	gitIn(tb, vault, "remote", "add", "origin", remote)
	gitIn(tb, vault, "config", "branch.main.remote", "origin")
	gitIn(tb, vault, "config", "branch.main.merge", "refs/heads/main")
}

// lastTwo are the last two events of a compat stream: the status before
// the terminal event, and the terminal event.
func lastTwo(tb testing.TB, body string) (status, end map[string]any) {
	tb.Helper()
	evs := compatLines(tb, body)
	if len(evs) < 2 {
		tb.Fatalf("stream: %s", body)
	}
	return evs[len(evs)-2], evs[len(evs)-1]
}

// A turn whose end-of-turn push gets no answer (the vault's remote
// accepts connections and never answers) ends once --git-remote-timeout
// is up, with its done and a status that says the shared repository did
// not answer in time; the note is committed locally.
func TestATurnWhosePushHangsEnds(t *testing.T) {
	t.Parallel()
	s := start(t, "--git-remote-timeout", "5s")
	bare := filepath.Join(t.TempDir(), "vault.git")
	gitIn(t, filepath.Dir(bare), "init", "-q", "--bare", "-b", "main", bare)
	tracks(t, s.env.VaultRoot, bare)
	silent, accepted := vaulttest.SilentRemote(t)
	gitIn(t, s.env.VaultRoot, "remote", "set-url", "--push", "origin", silent)

	msg := `{"message":"[[tool Write {\"file_path\":\"note.md\",\"content\":\"kept\\n\"}]]"}`
	begun := time.Now()
	status, end := lastTwo(t, readAll(t, s.req(t, "POST", "/api/claude/chat-stream", msg)))
	if end["type"] != "done" {
		t.Fatalf("turn ended with %v", end)
	}
	// Not git's own bound of 30 s for every call: the remote's.
	if took := time.Since(begun); took > 20*time.Second {
		t.Fatalf("the turn took %s with --git-remote-timeout 5s", took)
	}
	if status["type"] != "status" || !strings.Contains(status["message"].(string), "did not answer in time") {
		t.Fatalf("event before done: %v", status)
	}
	if got := gitIn(t, s.env.VaultRoot, "log", "--format=%s", "--", "sebastian/note.md"); got != "sebastian: 1 note changed (note.md)" {
		t.Fatalf("the note was not committed locally: %q", got)
	}
	if n := accepted(); n != 1 {
		t.Fatalf("the remote was asked %d times", n)
	}
}

// SIGTERM while a turn's end waits for a vault remote that accepts
// connections and never answers, and another chat's turn runs: run
// returns within --shutdown-grace (and a loaded machine's slack), and both clients get
// their turn's done, the waiting one with a status that says its notes
// were not recorded in git in time.
func TestShutdownWithARemoteThatNeverAnswers(t *testing.T) {
	t.Parallel()
	const grace = 3 * time.Second
	s := start(t, "--shutdown-grace", grace.String())
	silent, accepted := vaulttest.SilentRemote(t)
	tracks(t, s.env.VaultRoot, silent)

	// One chat runs a turn, another writes a note and its turn's end
	// waits for the remote.
	running := s.req(t, "POST", "/api/claude/chat-stream", `{"message":"[[slow 2000 50]]"}`)
	defer running.Body.Close()
	lines := bufio.NewReader(running.Body)
	for {
		line, err := lines.ReadString('\n')
		if err != nil {
			t.Fatalf("the running turn's stream ended: %v", err)
		}
		if strings.Contains(line, "tick") {
			break
		}
	}
	msg := `{"message":"[[tool Write {\"file_path\":\"note.md\",\"content\":\"kept\\n\"}]]"}`
	writing := s.req(t, "POST", "/api/claude/chat-stream", msg)
	defer writing.Body.Close()
	waitFor(t, time.Minute, "the turn end's pull", func() bool { return accepted() > 0 })

	begun := time.Now()
	s.cancel()
	rest, err := io.ReadAll(lines)
	if err != nil {
		t.Fatalf("the running turn's stream: %v", err)
	}
	if _, end := lastTwo(t, string(rest)); end["type"] != "error" || !strings.Contains(end["message"].(string), "The server restarted") {
		t.Fatalf("the running turn ended with %v", end)
	}
	status, end := lastTwo(t, readAll(t, writing))
	if end["type"] != "done" || status["type"] != "status" || !strings.Contains(status["message"].(string), "in time") {
		t.Fatalf("the writing turn ended with %v after %v", end, status)
	}
	select {
	case err := <-s.done:
		if err != nil {
			t.Fatal(err)
		}
		s.done <- nil
	case <-time.After(2 * time.Minute):
		t.Fatal("run did not return")
	}
	took := time.Since(begun)
	t.Logf("shutdown took %s", took)
	// A few seconds for a loaded machine to reap and close; far below
	// the remote's bound (20 s) and git's (30 s).
	if took > grace+5*time.Second {
		t.Fatalf("shutdown took %s with --shutdown-grace %s", took, grace)
	}
}
