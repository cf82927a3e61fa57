package main

import (
	"bufio"
	"encoding/json"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/majorhq/major/clitest"
	"github.com/majorhq/major/httpapi/httpapitest"
)

// startCaddy runs Debian's caddy with the repository's deploy/Caddyfile
// in front of s, serving plain HTTP on a free loopback port, and returns
// its URL.
func startCaddy(tb testing.TB, s *server) string {
	tb.Helper()
	bin, err := exec.LookPath("caddy")
	if err != nil {
		tb.Fatal("caddy is not installed: run scripts/install-caddy.sh (make test does)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	home := tb.TempDir()
	upstream := strings.TrimPrefix(s.url, "http://")
	cmd := exec.Command(bin, "run", "--config", filepath.Join("..", "..", "deploy", "Caddyfile"), "--adapter", "caddyfile")
	cmd.Env = []string{"HOME=" + home, "XDG_DATA_HOME=" + home, "XDG_CONFIG_HOME=" + home,
		"MAJOR_SITE=http://" + addr, "MAJOR_UPSTREAM=" + upstream, "CADDY_ADMIN=off"}
	logs, exited := clitest.Start(tb, cmd)
	url := "http://" + addr
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if r, err := http.Get(url + "/healthz"); err == nil {
			readAll(tb, r)
			if r.StatusCode == http.StatusOK {
				return url
			}
		}
		select {
		case <-exited:
			tb.Fatalf("caddy exited:\n%s", logs)
		default:
		}
		if time.Now().After(deadline) {
			tb.Fatalf("caddy did not answer:\n%s", logs)
		}
	}
}

// TestThroughCaddy runs the README's Caddy configuration in front of the
// server: a chat-stream's lines arrive while its turn still runs (no
// buffering), an events stream replays and follows, and a terminal's
// WebSocket opens and shows the CLI's screen.
func TestThroughCaddy(t *testing.T) {
	t.Parallel()
	s := start(t, "--trusted-proxies", "127.0.0.1")
	proxy := startCaddy(t, s)
	via := &server{url: proxy}
	id := s.newSessionAs(t, "sebastian")
	// Each step needs the one before: a proxy that buffers would hold
	// the events stream forever.
	step := func(name string, f func(t *testing.T)) {
		if !t.Run(name, f) {
			t.FailNow()
		}
	}

	step("chat-stream, line by line", func(t *testing.T) {
		resp := via.req(t, "POST", "/api/claude/chat-stream", `{"message":"[[slow 100 100]]","session_id":"`+id+`"}`)
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("chat-stream through the proxy: %s %s", resp.Status, readAll(t, resp))
		}
		lines := bufio.NewScanner(resp.Body)
		var seen []string
		ticked := false
		for !ticked && lines.Scan() {
			seen = append(seen, lines.Text())
			ticked = strings.Contains(lines.Text(), "tick ")
		}
		if !ticked {
			t.Fatalf("the stream ended (%v) before its first tick, after:\n%s", lines.Err(), strings.Join(seen, "\n"))
		}
		// The first tick is here: had the proxy held the answer back,
		// the turn (10 s of ticks, long for a loaded machine too) would
		// be over by now.
		var info struct{ State string }
		if err := json.Unmarshal([]byte(readAll(t, s.req(t, "GET", "/api/claude/sessions/"+id, ""))), &info); err != nil || info.State != "running" {
			t.Fatalf("at the first line through the proxy the session is %q (%v): the proxy buffers", info.State, err)
		}
		last := ""
		for lines.Scan() {
			last = lines.Text()
		}
		if !strings.Contains(last, `"type":"done"`) {
			t.Fatalf("the stream's last line: %s", last)
		}
	})

	step("events stream", func(t *testing.T) {
		resp := via.req(t, "GET", "/api/claude/sessions/"+id+"/events?after=0&types=turn_start,done", "")
		defer resp.Body.Close()
		lines := bufio.NewScanner(resp.Body)
		var types []string
		for len(types) < 2 && lines.Scan() {
			var ev struct{ Type string }
			_ = json.Unmarshal(lines.Bytes(), &ev)
			types = append(types, ev.Type)
		}
		if strings.Join(types, ",") != "turn_start,done" {
			t.Fatalf("events through the proxy: %v", types)
		}
		// Then it stays open, pinged, for what comes next.
		readAll(t, via.req(t, "POST", "/api/claude/chat", `{"message":"[[say once more]]","session_id":"`+id+`"}`))
		for lines.Scan() && !strings.Contains(lines.Text(), `"type":"done"`) {
		}
		if lines.Err() != nil {
			t.Fatal(lines.Err())
		}
	})

	step("terminal", func(t *testing.T) {
		term, status := httpapitest.DialTerminal(t, proxy, id, testToken, "sebastian")
		if status != http.StatusSwitchingProtocols {
			t.Fatalf("terminal through the proxy: %d", status)
		}
		defer term.Close()
		waitFor(t, 120*time.Second, "the CLI's screen through the proxy", func() bool { return strings.Contains(term.Text(), "accept edits on") })
		term.Send(t, websocket.MessageText, []byte(`{"type":"close"}`))
		select {
		case <-term.Closed():
		case <-time.After(30 * time.Second):
			t.Fatal("the terminal did not close")
		}
	})

	// The server saw the proxy's client, and logged each request.
	if !strings.Contains(s.logs.String(), `"route":"/api/claude/chat-stream"`) {
		t.Fatal("no access line for the chat-stream")
	}
}
