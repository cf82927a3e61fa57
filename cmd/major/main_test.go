package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/majorhq/major/clitest"
	"github.com/majorhq/major/internal/leakcheck"
	"github.com/majorhq/major/internal/procgroup"
	"github.com/majorhq/major/linkedin"
	"github.com/majorhq/major/linkedin/linkedintest"
	"github.com/majorhq/major/mcpserver"
	"github.com/majorhq/major/scriptedmodel"
)

func TestMain(m *testing.M) {
	if os.Getenv(shellProbeEnv) != "" {
		if err := serveShellProbe(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Getenv(probeEnv) != "" {
		if err := serveProbe(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	// The terminals' claude runs this binary as `major hook <id>`.
	if len(os.Args) > 1 && os.Args[1] == "hook" {
		os.Exit(hook(context.Background(), os.Args[2:]))
	}
	leakcheck.Main(m,
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}

type server struct {
	url    string
	env    *clitest.Env
	li     *linkedintest.Server
	logs   *clitest.Buffer
	cancel context.CancelFunc
	done   chan error
	args   []string
	state  string
	// environ is the program's environment: the test's own HOME and
	// model, so tests run in parallel.
	environ []string
}

func (s *server) logsStateDir(tb testing.TB) string { return s.state }

// restart runs the program again with the same arguments, state and vault.
func restart(tb testing.TB, old *server) *server {
	tb.Helper()
	return launch(tb, old.env, old.li, old.state, old.args, old.environ)
}

const testToken = "full-stack-token"

// start runs the whole program, as `major serve`, on a free port.
func start(tb testing.TB, extra ...string) *server {
	tb.Helper()
	return startModel(tb, nil, extra...)
}

// startModel is start with the model answering through respond (nil: the
// directive script).
func startModel(tb testing.TB, respond scriptedmodel.Responder, extra ...string) *server {
	tb.Helper()
	env := clitest.New(tb, respond)
	li := linkedintest.New(tb, linkedin.DefaultVersion)
	li.AddAccount("li-token-sebastian", "urn:li:person:seb")
	dir := tb.TempDir()
	authFile := filepath.Join(dir, "auth.json")
	liFile := filepath.Join(dir, "linkedin.json")
	writeFile(tb, authFile, `{"tokens": {"`+testToken+`": ["sebastian", "petra"]}}`)
	writeFile(tb, liFile, `{"sebastian": {"access_token": "li-token-sebastian", "author": "urn:li:person:seb"}}`)
	state := filepath.Join(dir, "state")
	// No warm pool unless the test asks for one: most tests open one chat
	// per person, and the waiting process started after it would only
	// cost the machine a CLI start. The warm pool has tests of its own,
	// and the full-stack test runs with it.
	warm := []string{"--warm-processes", "0"}
	for _, a := range extra {
		if strings.HasPrefix(a, "--warm-processes") {
			warm = nil
		}
	}
	args := append([]string{"serve", "--addr", "127.0.0.1:0", "--vault-root", env.VaultRoot,
		"--state-dir", state, "--config-dir", filepath.Join(dir, "config"), "--claude", env.Binary, "--auth-file", authFile,
		"--linkedin-api", li.URL, "--linkedin-config", liFile, "--log-level", "debug"}, warm...)
	args = append(args, extra...)
	return launch(tb, env, li, state, args, testEnviron(env))
}

// testEnviron is this process's environment with the test's HOME, model
// and CLI settings in place of its own, then overrides (KEY=value).
func testEnviron(env *clitest.Env, overrides ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "HOME" && !strings.HasPrefix(k, "ANTHROPIC_") && !strings.HasPrefix(k, "CLAUDE_") {
			out = append(out, kv)
		}
	}
	for _, kv := range env.ChildEnv() {
		if k, _, _ := strings.Cut(kv, "="); k == "HOME" || strings.HasPrefix(k, "ANTHROPIC_") || strings.HasPrefix(k, "CLAUDE_") {
			out = append(out, kv)
		}
	}
	return append(out, overrides...)
}

func launch(tb testing.TB, env *clitest.Env, li *linkedintest.Server, state string, args, environ []string) *server {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &server{env: env, li: li, logs: &clitest.Buffer{}, cancel: cancel, done: make(chan error, 1), args: args, state: state, environ: environ}
	go func() { s.done <- run(ctx, args, environ, s.logs, io.Discard) }()
	deadline := time.Now().Add(30 * time.Second)
	for s.url == "" {
		if time.Now().After(deadline) {
			tb.Fatalf("server did not start; logs:\n%s", s.logs)
		}
		select {
		case err := <-s.done:
			tb.Fatalf("run returned early: %v\n%s", err, s.logs)
		default:
		}
		for _, line := range strings.Split(s.logs.String(), "\n") {
			if strings.Contains(line, "major is serving") {
				var l struct{ Addr string }
				_ = json.Unmarshal([]byte(line), &l)
				s.url = l.Addr
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	tb.Cleanup(func() { s.stop(tb) })
	return s
}

func (s *server) stop(tb testing.TB) {
	s.cancel()
	select {
	case err := <-s.done:
		if err != nil {
			tb.Errorf("run: %v", err)
		}
		s.done <- nil
	case <-time.After(30 * time.Second):
		tb.Fatal("server did not shut down")
	}
}

func writeFile(tb testing.TB, path, content string) {
	tb.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		tb.Fatal(err)
	}
}

func (s *server) req(tb testing.TB, method, path, body string) *http.Response {
	tb.Helper()
	req, _ := http.NewRequest(method, s.url+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("X-Notes-Person", "sebastian")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	return resp
}

func readAll(tb testing.TB, resp *http.Response) string {
	tb.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

// withArg is args with flag's value set to value (added if missing).
func withArg(args []string, flag, value string) []string {
	out := append([]string{}, args...)
	for i, a := range out {
		if a == flag && i+1 < len(out) {
			out[i+1] = value
			return out
		}
	}
	return append(out, flag, value)
}

// TestServeFullStack runs the whole program, with a warm pool, from start
// to shutdown and back:
//   - /healthz and /readyz answer (with the CLI's version);
//   - a compat turn runs; the model sees exactly the seed's tools (no
//     shell, nothing from the vault), the LinkedIn MCP server is connected
//     and the CLI runs in the person's folder;
//   - a LinkedIn post asks for permission first, runs once allowed, and
//     its activity log is committed;
//   - /mcp is behind the same auth, and no token is logged;
//   - shutdown ends running turns with done on both streams, within the
//     grace time, and leaves no claude process (the waiting one included)
//     and no pid record;
//   - started again, an interrupted session answers as before and its next
//     message resumes the conversation.
func TestServeFullStack(t *testing.T) {
	t.Parallel()
	s := start(t, "--warm-processes", "1", "--shutdown-grace", "10s")
	step := func(name string, f func(t *testing.T)) {
		if !t.Run(name, f) {
			t.FailNow()
		}
	}
	var id string

	step("health and readiness", func(t *testing.T) {
		if got := readAll(t, s.req(t, "GET", "/healthz", "")); !strings.Contains(got, "ok") {
			t.Fatalf("healthz: %s", got)
		}
		if got := readAll(t, s.req(t, "GET", "/readyz", "")); !strings.Contains(got, `"ready"`) || !strings.Contains(got, `"claude_version":"`+clitest.PinnedVersion(t)+` (Claude Code)"`) {
			t.Fatalf("readyz: %s", got)
		}
	})

	step("a compat turn with the seed's tools in the person's folder", func(t *testing.T) {
		out := readAll(t, s.req(t, "POST", "/api/claude/chat-stream", `{"message":"[[say hello from the stack]]"}`))
		if !strings.Contains(out, `{"type":"text","delta":"hello from the stack"}`) || !strings.Contains(out, `"type":"done"`) {
			t.Fatalf("chat-stream: %s", out)
		}
		// The model sees exactly the seed's tools plus AskUserQuestion and
		// ExitPlanMode (asked in plan mode): no shell, nothing from the vault.
		var done struct {
			SessionID string `json:"session_id"`
		}
		_ = json.Unmarshal([]byte(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:]), &done)
		id = done.SessionID
		init := readInit(t, s, id)
		want := "AskUserQuestion,Edit,ExitPlanMode,Glob,Grep,Read,WebFetch,WebSearch,Write," +
			"mcp__linkedin__linkedin_post,mcp__linkedin__linkedin_post_comment,mcp__linkedin__linkedin_read_comments,mcp__linkedin__linkedin_reply_comment"
		if got := strings.Join(init.Tools, ","); got != want {
			t.Fatalf("tools the model sees:\n got %s\nwant %s", got, want)
		}
		if len(init.MCPServers) != 1 || init.MCPServers[0].Name != "linkedin" || init.MCPServers[0].Status != "connected" {
			t.Fatalf("mcp servers %+v", init.MCPServers)
		}
		// The person's folder, as clients see it: relative to itself.
		if init.Cwd != "." {
			t.Fatalf("cwd %s", init.Cwd)
		}
	})

	step("a LinkedIn post asks for permission first", func(t *testing.T) {
		msg := `{"message":"[[tool mcp__linkedin__linkedin_post {\"text\":\"Notes on notes\"}]]"}`
		r := s.req(t, "POST", "/api/claude/sessions/"+id+"/messages", msg)
		var posted struct{ After int64 }
		if body := readAll(t, r); r.StatusCode != 202 || json.Unmarshal([]byte(body), &posted) != nil {
			t.Fatalf("post message: %d %s", r.StatusCode, body)
		}
		events := s.req(t, "GET", fmt.Sprintf("/api/claude/sessions/%s/events?after=%d&types=permission,text,done,error", id, posted.After), "")
		defer events.Body.Close()
		lines := bufio.NewScanner(events.Body)
		next := func() map[string]any {
			for lines.Scan() {
				var m map[string]any
				_ = json.Unmarshal(lines.Bytes(), &m)
				if m["type"] != "ping" {
					return m
				}
			}
			t.Fatalf("events stream ended: %v", lines.Err())
			return nil
		}
		perm := next()
		if perm["type"] != "permission" || perm["tool"] != "mcp__linkedin__linkedin_post" {
			t.Fatalf("expected a permission prompt, got %v", perm)
		}
		if len(s.li.Requests()) != 0 {
			t.Fatal("LinkedIn was called before the person allowed it")
		}
		ans := `{"request_id":"` + perm["request_id"].(string) + `","behavior":"allow"}`
		if r := s.req(t, "POST", "/api/claude/sessions/"+id+"/permission", ans); r.StatusCode != 200 {
			t.Fatalf("permission: %d %s", r.StatusCode, readAll(t, r))
		}
		text := next()
		if !strings.Contains(text["delta"].(string), "Posted to LinkedIn: urn:li:share:") {
			t.Fatalf("model got %v", text)
		}
		if done := next(); done["type"] != "done" {
			t.Fatalf("turn end %v", done)
		}
		reqs := s.li.Requests()
		if len(reqs) != 1 || reqs[0].Token != "li-token-sebastian" || reqs[0].Method != "POST" {
			t.Fatalf("LinkedIn requests %+v", reqs)
		}
		log, err := exec.Command("git", "-C", s.env.VaultRoot, "log", "--format=%s", "--", mcpserver.ActivityLogPath("sebastian")).Output()
		if err != nil || !strings.Contains(string(log), "LinkedIn") {
			t.Fatalf("activity log commit: %q %v", log, err)
		}
	})

	step("the MCP endpoint needs the token, and no token is logged", func(t *testing.T) {
		req, _ := http.NewRequest("POST", s.url+"/mcp", strings.NewReader(`{}`))
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != 401 {
			t.Fatalf("/mcp without a token: %d", r.StatusCode)
		}
		if strings.Contains(s.logs.String(), testToken) || strings.Contains(s.logs.String(), "li-token-sebastian") {
			t.Fatal("a token was logged")
		}
	})

	// interrupted is the session the compat client had running at shutdown.
	var interrupted string
	step("shutdown ends turns and processes", func(t *testing.T) {
		r := s.req(t, "POST", "/api/claude/sessions/"+id+"/messages", `{"message":"[[slow 400 50]]"}`)
		var posted struct{ After int64 }
		if body := readAll(t, r); r.StatusCode != 202 || json.Unmarshal([]byte(body), &posted) != nil {
			t.Fatalf("post: %d %s", r.StatusCode, body)
		}
		events := s.req(t, "GET", fmt.Sprintf("/api/claude/sessions/%s/events?after=%d&types=text,status,done,error", id, posted.After), "")
		defer events.Body.Close()
		compat := s.req(t, "POST", "/api/claude/chat-stream", `{"message":"[[slow 400 50]]"}`)
		defer compat.Body.Close()
		compatLines := bufio.NewScanner(compat.Body)
		for compatLines.Scan() && !strings.Contains(compatLines.Text(), "tick") {
		}
		evLines := bufio.NewScanner(events.Body)
		for evLines.Scan() && !strings.Contains(evLines.Text(), "tick") {
		}
		// The compat client's chat: the other one running.
		var listed struct {
			Sessions []struct{ ID, State string }
		}
		if body := readAll(t, s.req(t, "GET", "/api/claude/sessions", "")); json.Unmarshal([]byte(body), &listed) != nil {
			t.Fatalf("sessions: %s", body)
		}
		for _, c := range listed.Sessions {
			if c.ID != id && c.State == "running" {
				interrupted = c.ID
			}
		}
		if interrupted == "" {
			t.Fatalf("the compat client's chat is not running: %+v", listed)
		}
		// Two sessions' processes, and one waiting for the person's next
		// new chat (recorded as it starts).
		var pids []os.DirEntry
		for deadline := time.Now().Add(60 * time.Second); len(pids) != 3; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d recorded claude processes, want 3", len(pids))
			}
			pids, _ = os.ReadDir(filepath.Join(s.logsStateDir(t), "pids"))
		}

		start := time.Now()
		s.cancel()
		var last string
		for compatLines.Scan() {
			last = compatLines.Text()
		}
		// A turn the shutdown stops says the server restarted.
		var end struct{ Type, Message string }
		if err := json.Unmarshal([]byte(last), &end); err != nil || end.Type != "error" || !strings.Contains(end.Message, "The server restarted") {
			t.Fatalf("compat client's last line at shutdown: %s", last)
		}
		last = ""
		for evLines.Scan() {
			if !strings.Contains(evLines.Text(), `"ping"`) {
				last = evLines.Text()
			}
		}
		if !strings.Contains(last, `"type":"error"`) || !strings.Contains(last, `"kind":"restarted"`) {
			t.Fatalf("events client's last line at shutdown: %s", last)
		}
		select {
		case err := <-s.done:
			if err != nil {
				t.Fatal(err)
			}
			s.done <- nil
		case <-time.After(time.Minute):
			t.Fatal("run did not return")
		}
		// The grace, and a loaded machine's slack.
		if took := time.Since(start); took > 15*time.Second {
			t.Fatalf("shutdown took %s", took)
		}
		for _, p := range pids {
			pid, _ := strconv.Atoi(p.Name())
			if live := procgroup.WaitGone(pid, 10*time.Second); len(live) != 0 {
				t.Fatalf("claude group %d survived shutdown: %v", pid, live)
			}
		}
		if left, _ := os.ReadDir(filepath.Join(s.logsStateDir(t), "pids")); len(left) != 0 {
			t.Fatalf("pid records left: %d", len(left))
		}
	})

	step("started again, the interrupted session resumes", func(t *testing.T) {
		// Without a warm pool: nothing here needs a new chat.
		s2 := launch(t, s.env, s.li, s.state, withArg(s.args, "--warm-processes", "0"), s.environ)
		hist := readAll(t, s2.req(t, "GET", "/api/claude/history?session_id="+interrupted, ""))
		if !strings.Contains(hist, `"content":"[[slow 400 50]]"`) {
			t.Fatalf("history after restart: %s", hist)
		}
		out := readAll(t, s2.req(t, "POST", "/api/claude/chat", `{"message":"[[recall]]","session_id":"`+interrupted+`"}`))
		// The CLI records the interrupt in its transcript, and says so.
		if !strings.Contains(out, `"response":"HISTORY: [[slow 400 50]] | [Request interrupted by user] | [[recall]]"`) {
			t.Fatalf("resumed after a restart mid-turn: %s", out)
		}
	})
}

type initEvent struct {
	Tools      []string `json:"tools"`
	Cwd        string   `json:"cwd"`
	MCPServers []struct {
		Name, Status string
	} `json:"mcp_servers"`
}

// readInit finds the CLI's system/init event in a session's log.
func readInit(tb testing.TB, s *server, id string) initEvent {
	tb.Helper()
	resp := s.req(tb, "GET", "/api/claude/sessions/"+id+"/events?types=cli", "")
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var line struct {
			Event struct {
				Type, Subtype string
				initEvent
			} `json:"event"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Event.Type == "system" && line.Event.Subtype == "init" {
			return line.Event.initEvent
		}
	}
	tb.Fatal("no system/init event")
	return initEvent{}
}

func TestWebClientFilesOnly(t *testing.T) {
	t.Parallel()
	wd, _ := os.Getwd()
	s := start(t, "--web-dir", filepath.Join(wd, "..", "..", "web"))
	for path, want := range map[string]int{
		"/app/": 200, "/app/index.html": 200, "/app/style.css": 200, "/app/js/app.js": 200,
		"/app/package.json": 404, "/app/e2e/": 404, "/app/e2e/run.sh": 404, "/app/js/": 404,
		"/app/node_modules/playwright-core/package.json": 404, "/app/../go.mod": 404,
	} {
		resp, err := http.Get(s.url + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
}

// Without --web-dir the client built into the binary is served, exactly as
// it is in the repository, and nothing else of the folder.
func TestWebClientIsBuiltIn(t *testing.T) {
	t.Parallel()
	s := start(t)
	for path, file := range map[string]string{
		"/app/": "index.html", "/app/style.css": "style.css", "/app/js/app.js": "js/app.js", "/app/js/stream.js": "js/stream.js",
	} {
		want, err := os.ReadFile(filepath.Join("..", "..", "web", filepath.FromSlash(file)))
		if err != nil {
			t.Fatal(err)
		}
		resp := s.req(t, "GET", path, "")
		got := readAll(t, resp)
		if file == "index.html" {
			// The page gets a nonce of its own, in its policy and its meta
			// tag, and is otherwise the file.
			m := regexp.MustCompile(`<meta name="csp-nonce" content="([A-Za-z0-9+/=]{16,})">`).FindStringSubmatch(got)
			if m == nil || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "'nonce-"+m[1]+"'") {
				t.Errorf("GET %s: no nonce shared by the page and its policy", path)
				continue
			}
			got = strings.Replace(got, m[1], "", 1)
		}
		if got != string(want) {
			t.Errorf("GET %s is not web/%s (%d bytes, want %d)", path, file, len(got), len(want))
		}
	}
	for _, path := range []string{"/app/package.json", "/app/embed.go", "/app/e2e/run.sh", "/app/js/"} {
		resp, err := http.Get(s.url + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", path, resp.StatusCode)
		}
	}
}

func TestFlagsAndEnv(t *testing.T) {
	t.Parallel()
	env := map[string]string{"MAJOR_VAULT_ROOT": "/v", "MAJOR_AUTH_FILE": "/a", "MAJOR_ADDR": ":9", "MAJOR_ASK_TIMEOUT": "3s",
		"MAJOR_CORS_ORIGINS": "https://notes.example, http://localhost:3000"}
	c, err := parseFlags([]string{"--addr", ":7"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Addr != ":7" || c.VaultRoot != "/v" || c.AuthFile != "/a" || c.AskTimeout != 3*time.Second || c.StateDir == "" || strings.HasPrefix(c.StateDir, "/v") ||
		strings.Join(c.CORSOrigins, " ") != "https://notes.example http://localhost:3000" {
		t.Fatalf("config %+v", c)
	}
	if c, _ := parseFlags(nil, func(k string) string { return env[k] }, io.Discard); len(c.CORSOrigins) == 0 {
		t.Fatal("MAJOR_CORS_ORIGINS ignored")
	}
	if c, _ := parseFlags([]string{"--vault-root", "/v", "--auth-file", "/a"}, func(string) string { return "" }, io.Discard); c.CORSOrigins != nil {
		t.Fatalf("CORS is on by default: %v", c.CORSOrigins)
	}
	n, err := parseFlags([]string{"--vault-root", "/v", "--auth-file", "/a", "--push-contact", "ops@notes.example", "--public-url", "https://major.example/"},
		func(k string) string {
			return map[string]string{"MAJOR_PUSH_ALLOW_HOSTS": "127.0.0.1, ntfy.lan:8080"}[k]
		}, io.Discard)
	if err != nil || strings.Join(n.Notify.AllowHosts, " ") != "127.0.0.1 ntfy.lan:8080" || n.Notify.Contact != "mailto:ops@notes.example" ||
		n.Notify.PublicURL != "https://major.example" || n.Notify.After != 20*time.Second || n.Notify.NtfyContent != "summary" {
		t.Fatalf("notification flags %+v %v", n.Notify, err)
	}
	for _, args := range [][]string{{}, {"--vault-root", "/v"}, {"--vault-root", "/v", "--auth-file", "/a", "extra"},
		{"--vault-root", "/v", "--auth-file", "/a", "--cors-origins", "*"},
		{"--vault-root", "/v", "--auth-file", "/a", "--cors-origins", "https://notes.example/app"},
		{"--vault-root", "/v", "--auth-file", "/a", "--cors-origins", "notes.example"},
		{"--vault-root", "/v", "--auth-file", "/a", "--shutdown-grace", "0s"},
		{"--vault-root", "/v", "--auth-file", "/a", "--git-remote-timeout", "-1s"},
		{"--vault-root", "/v", "--auth-file", "/a", "--notify-after", "0s"},
		{"--vault-root", "/v", "--auth-file", "/a", "--public-url", "ftp://major.example"},
		{"--vault-root", "/v", "--auth-file", "/a", "--public-url", "https://major.example/?x=1"},
		{"--vault-root", "/v", "--auth-file", "/a", "--push-allow-hosts", "http://ntfy.lan"},
		{"--vault-root", "/v", "--auth-file", "/a", "--push-contact", "nobody"},
		{"--vault-root", "/v", "--auth-file", "/a", "--ntfy-content", "some"},
		{"--vault-root", "/v", "--auth-file", "/a", "--fcm-content", "all"}} {
		if _, err := parseFlags(args, func(string) string { return "" }, io.Discard); err == nil {
			t.Fatalf("args %v accepted", args)
		}
	}
	if err := run(context.Background(), []string{"bogus"}, nil, io.Discard, io.Discard); err == nil {
		t.Fatal("unknown command accepted")
	}
}

// A bad environment value stops the start with an error naming the
// variable; it never silently becomes the default.
func TestBadEnvironmentValueIsAnError(t *testing.T) {
	t.Parallel()
	for key, bad := range map[string]string{
		"MAJOR_MAX_PROCESSES": "abc", "MAJOR_MAX_PROCESSES_PER_PERSON": "1.5", "MAJOR_SLOT_WAIT": "30",
		"MAJOR_IDLE_TIMEOUT": "soon", "MAJOR_SESSION_TTL": "-", "MAJOR_ASK_TIMEOUT": "10 minutes",
	} {
		env := map[string]string{"MAJOR_VAULT_ROOT": "/v", "MAJOR_AUTH_FILE": "/a", key: bad}
		_, err := parseFlags(nil, func(k string) string { return env[k] }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s=%q: err %v, want an error naming %s", key, bad, err, key)
		}
		// The command line wins over the environment, bad or not.
		flagName := "--" + strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(key, "MAJOR_")), "_", "-")
		if _, err := parseFlags([]string{flagName + "=1"}, func(k string) string { return env[k] }, io.Discard); err != nil && strings.Contains(err.Error(), key) {
			t.Errorf("%s given on the command line, but the environment's bad value still counted: %v", flagName, err)
		}
	}
}

// Every flag's help names the variable that stands in for it.
func TestEveryFlagNamesItsVariable(t *testing.T) {
	t.Parallel()
	var help strings.Builder
	_, _ = parseFlags([]string{"-h"}, func(string) string { return "" }, &help)
	for _, line := range strings.Split(help.String(), "\n") {
		if name, ok := strings.CutPrefix(strings.TrimSpace(line), "-"); ok {
			name, _, _ = strings.Cut(name, " ")
			if !strings.Contains(help.String(), envName(name)) {
				t.Errorf("the help of --%s does not name %s", name, envName(name))
			}
		}
	}
}

func TestProcessesPerPerson(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		env  string
		want int
	}{
		{"default leaves room for the others", nil, "", 4},
		{"odd maximum rounds up", []string{"--max-processes", "3"}, "", 2},
		{"one slot", []string{"--max-processes", "1"}, "", 1},
		{"no limit", []string{"--max-processes", "0"}, "", 0},
		{"flag", []string{"--max-processes-per-person", "3"}, "", 3},
		{"env", nil, "5", 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"MAJOR_VAULT_ROOT": "/v", "MAJOR_AUTH_FILE": "/a", "MAJOR_MAX_PROCESSES_PER_PERSON": tc.env}
			c, err := parseFlags(tc.args, func(k string) string { return env[k] }, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if c.MaxPerPerson != tc.want {
				t.Fatalf("per person %d, want %d", c.MaxPerPerson, tc.want)
			}
		})
	}
	for _, args := range [][]string{{"--max-processes-per-person", "-1"}, {"--max-processes", "-2"}} {
		if _, err := parseFlags(append([]string{"--vault-root", "/v", "--auth-file", "/a"}, args...), func(string) string { return "" }, io.Discard); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}

// rawConn dials the server for a test that speaks HTTP by hand.
func (s *server) rawConn(tb testing.TB) net.Conn {
	tb.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	return conn
}

// closedByServer reads until the server closes conn, failing the test if
// it has not within 20s.
func closedByServer(tb testing.TB, conn net.Conn, r io.Reader) {
	tb.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.Copy(io.Discard, r); err != nil {
		tb.Fatalf("the server kept the connection: %v", err)
	}
}

// TestHTTPServingOnOneSession runs on one session, so on one CLI process:
//   - a person set to publish automatically posts to LinkedIn from a chat
//     without a permission prompt;
//   - a request whose body arrives too slowly is cut off (--http-read-timeout);
//   - an idle kept-alive connection is closed (--http-idle-timeout);
//   - both streams of a turn outlast the read timeout;
//   - /metrics counts the sessions, processes, turns, failed turns and
//     subscribers, and the turns' durations.
func TestHTTPServingOnOneSession(t *testing.T) {
	t.Parallel()
	// No process waits for a new chat: the process count is the session's.
	s := start(t, "--linkedin-auto-publish", "sebastian", "--http-read-timeout", "1s", "--http-idle-timeout", "1s", "--warm-processes", "0")
	var id string

	step := func(name string, f func(t *testing.T)) {
		if !t.Run(name, f) {
			t.FailNow()
		}
	}
	step("auto-publish skips the prompt", func(t *testing.T) {
		var out struct {
			SessionID string `json:"session_id"`
			Response  string
		}
		body := readAll(t, s.req(t, "POST", "/api/claude/chat", `{"message":"[[tool mcp__linkedin__linkedin_post {\"text\":\"auto\"}]]"}`))
		if err := json.Unmarshal([]byte(body), &out); err != nil || !strings.Contains(out.Response, "Posted to LinkedIn: urn:li:share:") {
			t.Fatalf("auto-publish: %s (%v)", body, err)
		}
		if reqs := s.li.Requests(); len(reqs) != 1 {
			t.Fatalf("LinkedIn got %d requests", len(reqs))
		}
		id = out.SessionID
	})

	step("a slow body is cut off", func(t *testing.T) {
		conn := s.rawConn(t)
		head := "POST /api/claude/chat-stream HTTP/1.1\r\nHost: major\r\nAuthorization: Bearer " + testToken +
			"\r\nX-Notes-Person: sebastian\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
		if _, err := io.WriteString(conn, head+`{"message":`); err != nil {
			t.Fatal(err)
		}
		closedByServer(t, conn, conn)
	})

	step("an idle kept-alive connection is closed", func(t *testing.T) {
		conn := s.rawConn(t)
		if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: major\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		if resp.StatusCode != http.StatusOK || resp.Close {
			t.Fatalf("healthz: %d, close %v", resp.StatusCode, resp.Close)
		}
		closedByServer(t, conn, br)
	})

	step("streams outlast the read timeout", func(t *testing.T) {
		events := s.req(t, "GET", "/api/claude/sessions/"+id+"/events?types=text,done,error", "")
		defer events.Body.Close()
		out := readAll(t, s.req(t, "POST", "/api/claude/chat-stream", `{"message":"[[slow 30 100]]","session_id":"`+id+`"}`))
		if strings.Count(out, "tick ") != 30 || !strings.Contains(out, `"type":"done"`) {
			t.Fatalf("compat stream of a 3s turn under a 1s read timeout: %s", out)
		}
		// The stream may start with the end of the session's turn before.
		lines := bufio.NewScanner(events.Body)
		ticks := 0
		for lines.Scan() && (ticks == 0 || !strings.Contains(lines.Text(), `"type":"done"`)) {
			ticks += strings.Count(lines.Text(), "tick ")
		}
		if ticks != 30 {
			t.Fatalf("events stream: %d ticks, then %v", ticks, lines.Err())
		}
	})

	step("metrics", func(t *testing.T) {
		// Four turns in all: the post, the slow one and these two, the
		// last failing.
		readAll(t, s.req(t, "POST", "/api/claude/chat", `{"message":"[[say counted]]","session_id":"`+id+`"}`))
		readAll(t, s.req(t, "POST", "/api/claude/chat", `{"message":"[[status 400]]","session_id":"`+id+`"}`))
		want := []string{
			"major_sessions 1", "major_claude_processes 1", "major_turns_total 4", "major_turn_errors_total 1",
			"major_dropped_subscribers_total 0", "major_subscribers 0", `major_turn_duration_seconds_bucket{le="+Inf"} 4`,
			"# TYPE major_turn_duration_seconds histogram",
			// The runtime's and the process's, and the HTTP API's by route.
			"# TYPE go_goroutines gauge", "# TYPE process_resident_memory_bytes gauge",
			`major_http_requests_total{method="POST",route="/api/claude/chat",status="200"}`,
			`major_http_request_duration_seconds_count{method="POST",route="/api/claude/chat",status="200"}`,
		}
		// The events client of the step before detaches on its own time.
		var got string
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			got = readAll(t, s.req(t, "GET", "/metrics", ""))
			if strings.Contains(got, "\nmajor_subscribers 0\n") || time.Now().After(deadline) {
				break
			}
		}
		for _, w := range want {
			if !strings.Contains(got, w+"\n") && !strings.Contains(got, w+" ") {
				t.Fatalf("metrics lack %q:\n%s", w, got)
			}
		}
		// Never a person, a session or a token name.
		for _, never := range []string{"sebastian", id, "token"} {
			if strings.Contains(got, never) {
				t.Fatalf("metrics name %q:\n%s", never, got)
			}
		}
	})
}

// newSessionAs creates an empty session of person and returns its id.
func (s *server) newSessionAs(tb testing.TB, person string) string {
	tb.Helper()
	req, _ := http.NewRequest("POST", s.url+"/api/claude/sessions", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("X-Notes-Person", person)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	var created struct{ ID string }
	if err := json.Unmarshal([]byte(readAll(tb, resp)), &created); err != nil || resp.StatusCode != http.StatusCreated {
		tb.Fatalf("create session: %d %v", resp.StatusCode, err)
	}
	return created.ID
}

func TestConnectionAndSessionLimitFlags(t *testing.T) {
	t.Parallel()
	base := []string{"--vault-root", "/v", "--auth-file", "/a"}
	c, err := parseFlags(base, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.SessionsPerPerson != 200 || c.ReadTimeout != 30*time.Second || c.KeepAlive != 2*time.Minute {
		t.Fatalf("defaults: %d sessions, read %s, keep-alive %s", c.SessionsPerPerson, c.ReadTimeout, c.KeepAlive)
	}
	env := map[string]string{"MAJOR_MAX_SESSIONS_PER_PERSON": "7", "MAJOR_HTTP_READ_TIMEOUT": "5s", "MAJOR_HTTP_IDLE_TIMEOUT": "9s"}
	if c, err = parseFlags(base, func(k string) string { return env[k] }, io.Discard); err != nil {
		t.Fatal(err)
	}
	if c.SessionsPerPerson != 7 || c.ReadTimeout != 5*time.Second || c.KeepAlive != 9*time.Second {
		t.Fatalf("from the environment: %d sessions, read %s, keep-alive %s", c.SessionsPerPerson, c.ReadTimeout, c.KeepAlive)
	}
	for _, args := range [][]string{{"--max-sessions-per-person", "-1"}, {"--http-read-timeout", "0s"}, {"--http-idle-timeout", "-1s"}} {
		if _, err := parseFlags(append(append([]string{}, base...), args...), func(string) string { return "" }, io.Discard); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}

// `major --help` lists the commands and `major serve --help` (or a help
// flag of another command) its flags, on stdout, as a success; a missing
// or unknown command is still an error, with the commands on stderr.
func TestHelp(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args    []string
		ok      bool
		out     []string // on stdout
		errText []string // on stderr
	}{
		{args: []string{"--help"}, ok: true, out: []string{"major serve", "major token", "major backup"}},
		{args: []string{"-h"}, ok: true, out: []string{"major serve"}},
		{args: []string{"help"}, ok: true, out: []string{"major serve"}},
		{args: []string{"serve", "--help"}, ok: true, out: []string{"-vault-root", "-auth-file", "-addr", "MAJOR_ADDR"}},
		{args: []string{"serve", "-h"}, ok: true, out: []string{"-vault-root"}},
		{args: []string{"token", "--help"}, ok: true, out: []string{"major token add"}},
		{args: []string{"token", "add", "--help"}, ok: true, out: []string{"-person", "-name"}},
		{args: []string{"backup", "--help"}, ok: true, out: []string{"-state-dir"}},
		{args: nil, ok: false, errText: []string{"major serve"}},
		{args: []string{"bogus"}, ok: false, errText: []string{"major serve"}},
		{args: []string{"serve", "--bogus"}, ok: false, errText: []string{"-vault-root"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stdout, stderr strings.Builder
			err := run(context.Background(), tt.args, nil, &stdout, &stderr)
			if (err == nil) != tt.ok {
				t.Fatalf("err %v; stdout %q; stderr %q", err, stdout.String(), stderr.String())
			}
			for _, want := range tt.out {
				if !strings.Contains(stdout.String(), want) {
					t.Errorf("stdout lacks %q:\n%s", want, stdout.String())
				}
			}
			for _, want := range tt.errText {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
				}
			}
			if tt.ok && stderr.Len() > 0 {
				t.Errorf("help wrote to stderr: %q", stderr.String())
			}
		})
	}
}
