package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/majorhq/major/httpapi/httpapitest"
	"github.com/majorhq/major/internal/procgroup"
)

// openTerminal connects as a browser does: token and person as
// subprotocols.
func openTerminal(tb testing.TB, s *server, id string) *httpapitest.Terminal {
	tb.Helper()
	c, status := httpapitest.DialTerminal(tb, s.url, id, testToken, "sebastian")
	if status != http.StatusSwitchingProtocols {
		tb.Fatalf("open terminal: status %d", status)
	}
	return c
}

// typeLine types text, then Enter, as separate keystrokes would arrive
// (Enter once the CLI has shown the text).
func typeLine(tb testing.TB, c *httpapitest.Terminal, text string) {
	tb.Helper()
	c.Type(tb, text)
	c.Send(tb, websocket.MessageBinary, []byte("\r"))
}

// submit types a prompt into the terminal until cond shows it reached the
// model: a prompt typed while the CLI still finishes its previous turn
// (its Stop hook running) can be dropped by the CLI's input box, so after
// a while without effect it is typed again (at most three times).
func submit(tb testing.TB, c *httpapitest.Terminal, text, what string, cond func() bool) {
	tb.Helper()
	for attempt := 1; ; attempt++ {
		typeLine(tb, c, text)
		deadline := time.Now().Add(40 * time.Second)
		for !cond() && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if cond() {
			return
		}
		if attempt == 3 {
			tb.Fatalf("timed out waiting for %s", what)
		}
	}
}

// waitFor polls until cond holds, failing after within.
func waitFor(tb testing.TB, within time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// terminalClaude lists the interactive claude processes (no -p) whose
// working folder is dir and whose parent is not a claude (the CLI starts
// helpers of its own, some in a group of their own, while a turn's hooks
// run).
func terminalClaude(tb testing.TB, dir string) []int {
	tb.Helper()
	var pids []int
	for _, pid := range procgroup.All() {
		if cwd, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "cwd")); err != nil || cwd != dir {
			continue
		}
		p, ok := procgroup.Read(pid)
		args := procgroup.Args(pid)
		// The terminal's claude, not a claude it started; in the sandbox
		// it is bwrap's child, not the leader of its group.
		if ok && isClaude(args) && !containsArg(args, "-p") && !isClaude(procgroup.Args(p.PPID)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// describe names each process of pids with its parent and its first
// arguments, for a failure's message.
func describe(pids []int) string {
	var parts []string
	for _, pid := range pids {
		p, _ := procgroup.Read(pid)
		args := procgroup.Args(pid)
		parts = append(parts, fmt.Sprintf("%d (parent %d) %q", pid, p.PPID, args[:min(len(args), 4)]))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// pidRecords are the process groups in the server's orphan records.
func pidRecords(tb testing.TB, s *server) []int {
	tb.Helper()
	entries, err := os.ReadDir(filepath.Join(s.state, "pids"))
	if err != nil {
		tb.Fatal(err)
	}
	var out []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// isClaude reports whether a command line runs the claude binary.
func isClaude(args []string) bool { return len(args) > 0 && strings.Contains(args[0], "claude") }

func containsArg(args []string, a string) bool {
	for _, x := range args {
		if x == a {
			return true
		}
	}
	return false
}

// userTexts is every text the person sent in the model's last request.
func lastRequestTexts(s *server) string {
	reqs := s.env.Model.Requests()
	if len(reqs) == 0 {
		return ""
	}
	return strings.Join(reqs[len(reqs)-1].UserTexts(), " | ")
}

// The terminal continues the app's conversation and the app continues the
// terminal's: a prompt typed in the terminal reaches the model with the
// app's earlier messages, a resize reaches the pty, a write outside the
// vault is denied there too, app messages get 409 meanwhile, a client that
// comes back within the grace time finds the same process, and after the
// grace time nothing is left running and the next app message has the
// terminal's turns in its history.
func TestTerminalContinuesTheConversation(t *testing.T) {
	t.Parallel()
	s := start(t, "--terminal-grace", "10s")
	vaultDir := filepath.Join(s.env.VaultRoot, "sebastian")

	out := readAll(t, s.req(t, "POST", "/api/claude/chat-stream", `{"message":"[[say the app's first answer]] app-marker"}`))
	var done struct {
		SessionID string `json:"session_id"`
	}
	_ = json.Unmarshal([]byte(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:]), &done)
	id := done.SessionID
	if id == "" {
		t.Fatalf("no session: %s", out)
	}

	term := openTerminal(t, s, id)
	waitFor(t, 120*time.Second, "the CLI's prompt", func() bool { return strings.Contains(term.Text(), "accept edits on") })
	pids := terminalClaude(t, vaultDir)
	if len(pids) != 1 {
		t.Fatalf("interactive claude processes in the vault: %v", pids)
	}
	// Its process group is in the orphan records, as a chat's CLI's is.
	group, _ := procgroup.Read(pids[0])
	if !slices.Contains(pidRecords(t, s), group.PGID) {
		t.Fatalf("the terminal's group %d is not in the orphan records %v", group.PGID, pidRecords(t, s))
	}

	// One writer: the app waits for the terminal.
	if r := s.req(t, "POST", "/api/claude/sessions/"+id+"/messages", `{"message":"hello from the app"}`); r.StatusCode != 409 {
		t.Fatalf("app message while the terminal is open: %d %s", r.StatusCode, readAll(t, r))
	}

	// The CLI draws its rules across the whole width.
	term.Send(t, websocket.MessageText, []byte(`{"type":"resize","cols":123,"rows":40}`))
	waitFor(t, 20*time.Second, "the screen at the new width", func() bool { return strings.Contains(term.Text(), strings.Repeat("─", 123)) })

	submit(t, term, "[[recall]] terminal-marker", "the terminal's prompt at the model", func() bool {
		return strings.Contains(lastRequestTexts(s), "terminal-marker")
	})
	if got := lastRequestTexts(s); !strings.Contains(got, "app-marker") {
		t.Fatalf("the terminal's request lacks the app's message: %s", got)
	}

	outside := filepath.Join(t.TempDir(), "outside.txt")
	submit(t, term, `[[tool Write {"file_path":"`+outside+`","content":"escaped"}]]`, "the Write's result at the model", func() bool {
		for _, r := range s.env.Model.Requests() {
			for _, b := range r.ToolResults() {
				if strings.Contains(b.ResultText(), "outside") {
					return true
				}
			}
		}
		return false
	})
	if _, err := os.Stat(outside); !os.IsNotExist(err) {
		t.Fatalf("the terminal wrote outside the vault: %v", err)
	}

	// Away and back within the grace time: the same process, and the
	// screen so far first.
	pids = terminalClaude(t, vaultDir)
	term.Close()
	time.Sleep(500 * time.Millisecond)
	again := openTerminal(t, s, id)
	waitFor(t, 10*time.Second, "the scroll-back", func() bool { return strings.Contains(again.Text(), "accept edits on") })
	if now := terminalClaude(t, vaultDir); len(now) != 1 || len(pids) != 1 || now[0] != pids[0] {
		t.Fatalf("the terminal's process changed across a reconnect: %s then %s", describe(pids), describe(now))
	}

	// Gone for longer than the grace time: nothing is left running.
	again.Close()
	waitFor(t, time.Minute, "the terminal to end", func() bool { return len(terminalClaude(t, vaultDir)) == 0 })
	waitFor(t, 10*time.Second, "the terminal's record to go", func() bool { return !slices.Contains(pidRecords(t, s), group.PGID) })

	// What was said in the terminal is in the chat's history, the model's
	// answer too; its tool call is not a message.
	var hist string
	waitFor(t, 10*time.Second, "the terminal's turns in the history", func() bool {
		hist = readAll(t, s.req(t, "GET", "/api/claude/history?session_id="+id, ""))
		return strings.Contains(hist, `"content":"[[recall]] terminal-marker"`)
	})
	if !strings.Contains(hist, `HISTORY: [[say the app's first answer]] app-marker | [[recall]] terminal-marker`) || strings.Contains(hist, "tool_result") {
		t.Fatalf("the history after the terminal: %s", hist)
	}
	rich := readAll(t, s.req(t, "GET", "/api/claude/sessions/"+id+"/messages", ""))
	if !strings.Contains(rich, `"terminal":true`) {
		t.Fatalf("the rich history does not mark the terminal's messages: %s", rich)
	}

	// The app resumes the conversation, with the terminal's turns in it.
	waitFor(t, 10*time.Second, "the session to be free", func() bool {
		r := s.req(t, "POST", "/api/claude/sessions/"+id+"/messages", `{"message":"[[recall]] back-in-the-app"}`)
		readAll(t, r)
		return r.StatusCode == 202
	})
	waitFor(t, 120*time.Second, "the app's turn at the model", func() bool {
		return strings.Contains(lastRequestTexts(s), "back-in-the-app")
	})
	if got := lastRequestTexts(s); !strings.Contains(got, "terminal-marker") || !strings.Contains(got, "app-marker") {
		t.Fatalf("the app's turn lacks the terminal's: %s", got)
	}
}

// pasteText is a paste of about size bytes, as a browser's terminal sends
// one: many lines between the markers of a bracketed paste.
func pasteText(size int) []byte {
	var b strings.Builder
	b.WriteString("\x1b[200~")
	for i := 0; b.Len() < size; i++ {
		fmt.Fprintf(&b, "line %d of a long paste into the terminal\n", i)
	}
	b.WriteString("\x1b[201~")
	return []byte(b.String())
}

// A large paste the CLI does not read does not hold the terminal up. The
// person suspends the CLI (Ctrl-Z: it waits for an `fg` that never comes
// and reads nothing) and pastes about 900 KB, more than the pty holds;
// then the client ends the terminal ({"type":"close"}) or simply goes
// away. Either is noticed at once: the terminal's claude is gone (after
// the close, or after the grace time), the one process slot it held
// serves the app's next turn, and no goroutine is left behind (goleak, in
// TestMain).
func TestTerminalEndsWhileAPasteWaits(t *testing.T) {
	t.Parallel()
	s := start(t, "--terminal-grace", "2s", "--max-processes", "1")
	vaultDir := filepath.Join(s.env.VaultRoot, "sebastian")
	id := s.newSessionAs(t, "sebastian")

	for _, c := range []struct {
		name  string
		leave func(testing.TB, *httpapitest.Terminal)
	}{
		{"the client closes the terminal", func(tb testing.TB, term *httpapitest.Terminal) {
			term.Send(tb, websocket.MessageText, []byte(`{"type":"close"}`))
			select {
			case <-term.Closed():
			case <-time.After(60 * time.Second):
				tb.Fatal("the close was not noticed behind the paste")
			}
			if term.Status() != websocket.StatusNormalClosure {
				tb.Errorf("close status %d, want 1000", term.Status())
			}
		}},
		{"the client goes away", func(_ testing.TB, term *httpapitest.Terminal) { term.Drop() }},
	} {
		t.Run(c.name, func(t *testing.T) {
			marker := strings.ReplaceAll(c.name, " ", "-")
			// The app's turn of the case before may still be ending.
			var term *httpapitest.Terminal
			waitFor(t, 30*time.Second, "the terminal to open", func() bool {
				c, status := httpapitest.DialTerminal(t, s.url, id, testToken, "sebastian")
				term = c
				return status == http.StatusSwitchingProtocols
			})
			waitFor(t, 120*time.Second, "the CLI's prompt", func() bool { return strings.Contains(term.Text(), "accept edits on") })
			term.Send(t, websocket.MessageBinary, []byte("\x1a"))
			waitFor(t, 30*time.Second, "the CLI to suspend itself", func() bool { return strings.Contains(term.Text(), "Claude Code is suspended") })
			paste := pasteText(900 << 10)
			for len(paste) > 0 {
				n := min(len(paste), 32<<10)
				term.Send(t, websocket.MessageBinary, paste[:n])
				paste = paste[n:]
			}
			c.leave(t, term)
			waitFor(t, 60*time.Second, "the terminal's claude to end", func() bool { return len(terminalClaude(t, vaultDir)) == 0 })

			// The app's turn takes the one process slot the terminal held.
			waitFor(t, 30*time.Second, "the session to be free", func() bool {
				r := s.req(t, "POST", "/api/claude/sessions/"+id+"/messages", `{"message":"[[say back]] back-`+marker+`"}`)
				readAll(t, r)
				return r.StatusCode == http.StatusAccepted
			})
			waitFor(t, 120*time.Second, "the app's turn at the model", func() bool {
				return strings.Contains(lastRequestTexts(s), "back-"+marker)
			})
		})
	}
}

// A terminal closed the moment its answer shows keeps that turn: the
// CLI gets the hangup itself (not its sandbox, which would die of it and
// kill the CLI before it saved the turn), and the app's next message has
// the terminal's turn in its history.
func TestTerminalClosedRightAfterItsAnswerKeepsTheTurn(t *testing.T) {
	t.Parallel()
	s := start(t)
	id := s.newSessionAs(t, "sebastian")
	if got := s.chatIn(t, "sebastian", id, "[[say first]]"); got != "first" {
		t.Fatalf("first turn: %q", got)
	}
	term := openTerminal(t, s, id)
	waitFor(t, 120*time.Second, "the CLI's prompt", func() bool { return strings.Contains(term.Text(), "accept edits on") })
	submit(t, term, "[[say answered in the terminal]] TERMINAL-TURN", "the answer", func() bool {
		return strings.Count(term.Text(), "answered in the terminal") >= 2
	})
	endTerminal(t, term)
	waitFor(t, 30*time.Second, "the conversation back with the app", func() bool {
		r := s.req(t, "POST", "/api/claude/sessions/"+id+"/messages", `{"message":"[[recall]]"}`)
		defer readAll(t, r)
		return r.StatusCode == 202
	})
	var answer string
	waitFor(t, 60*time.Second, "the recall's answer", func() bool {
		var h struct {
			Messages []struct{ Role, Content string } `json:"messages"`
		}
		_ = json.Unmarshal([]byte(readAll(t, s.req(t, "GET", "/api/claude/history?session_id="+id, ""))), &h)
		if n := len(h.Messages); n >= 2 && h.Messages[n-2].Content == "[[recall]]" && h.Messages[n-1].Role == "assistant" {
			answer = h.Messages[n-1].Content
			return true
		}
		return false
	})
	if !strings.Contains(answer, "TERMINAL-TURN") {
		t.Errorf("the terminal's turn is lost: the model recalls %q", answer)
	}
}
