package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/mark3labs/mcp-go/mcp"
	mcpgo "github.com/mark3labs/mcp-go/server"

	"github.com/majorhq/major/clihome"
	"github.com/majorhq/major/httpapi/httpapitest"
)

// shellProbeEnv makes this test binary, started by the CLI as an MCP
// server, serve the shell probe (see TestMain).
const shellProbeEnv = "SHELL_PROBE_MCP_SERVER"

// serveShellProbe is a stdio MCP server with one tool, run, that runs its
// cmd with /bin/sh -c and answers what it printed: code of the person's
// own inside their sandbox, as the terminal's `!` shell runs it, or any
// MCP server an owner configures (an npm package, a script).
func serveShellProbe() error {
	s := mcpgo.NewMCPServer("shell", "1.0.0", mcpgo.WithToolCapabilities(false))
	s.AddTool(mcp.NewTool("run", mcp.WithDescription("Runs a shell command"), mcp.WithString("cmd")),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			out, err := exec.CommandContext(ctx, "/bin/sh", "-c", req.GetString("cmd", "")).CombinedOutput()
			text := "SHELL<<" + string(out) + ">>"
			if err != nil {
				text += " " + err.Error()
			}
			return mcp.NewToolResultText(text), nil
		})
	return mcpgo.ServeStdio(s)
}

// startWithShell starts the server with the shell probe configured as
// sebastian's MCP server (shellConfig), in the configuration folder it
// returns.
func startWithShell(tb testing.TB) (*server, string) {
	tb.Helper()
	conf := tb.TempDir()
	shellConfig(tb, conf)
	return start(tb, "--config-dir", conf), conf
}

// shellConfig configures the shell probe as sebastian's MCP server in
// conf, allowed to run without asking; args are more arguments of the
// probe's, as an owner's configuration names them. The server reads it
// for each new session.
func shellConfig(tb testing.TB, conf string, args ...string) {
	tb.Helper()
	self, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	probe, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{"shell": map[string]any{
		"command": self, "args": append([]string{"-test.run=^$"}, args...), "env": map[string]string{shellProbeEnv: "1"},
	}}})
	writeConfig(tb, conf, map[string]string{
		"persons/sebastian/mcp.json":    string(probe),
		"persons/sebastian/config.json": `{"tools":{"allow":["mcp__shell"]}}`,
	})
}

// shell runs cmd in sebastian's sandbox, through the shell probe in
// session id, and returns what the tool answered.
func (s *server) shell(tb testing.TB, id, cmd string) string {
	tb.Helper()
	input, _ := json.Marshal(map[string]string{"cmd": cmd})
	got := s.chatIn(tb, "sebastian", id, "[[tool mcp__shell__run "+string(input)+"]]")
	if !strings.Contains(got, "SHELL<<") {
		tb.Fatalf("the shell probe did not answer: %q", got)
	}
	return got
}

// Code in a person's sandbox writes a git repository of its own into
// the person's folder, whose configuration names a program for git to
// run (core.fsmonitor). The end-of-turn commit records it as a gitlink;
// from then on every `git status` the server runs in the vault looks
// into that repository and runs the program: on the host, as the server,
// with the server's environment (its Anthropic key) and every file of the
// server's and of every person. The terminal's `!` shell does the same
// (the person themselves needs nothing else).
func TestSandboxedCodeNeverRunsInTheServersGit(t *testing.T) {
	t.Parallel()
	s, _ := startWithShell(t)
	id := s.newSessionAs(t, "sebastian")
	seb := s.env.Vault("sebastian")
	marker := filepath.Join(t.TempDir(), "ran-on-the-host")
	plant := "cd " + seb + " && mkdir sub && cd sub && git init -q && " +
		"git -c user.name=a -c user.email=a@b commit -q --allow-empty -m x && " +
		"git config core.fsmonitor \"env > '" + marker + "'; false\" && echo PLANTED"
	if got := s.shell(t, id, plant); !strings.Contains(got, "PLANTED") {
		t.Fatalf("could not write the repository in the person's folder: %s", got)
	}
	// Each turn with a tool call ends with the server's git looking at
	// the person's folder: the first records sub as a gitlink, the next
	// asks git status about it.
	for range 2 {
		s.shell(t, id, "true")
	}
	if b, err := os.ReadFile(marker); err == nil {
		leaked := ""
		for _, kv := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(kv, "ANTHROPIC_API_KEY=") {
				leaked = " (with " + kv + ")"
			}
		}
		t.Errorf("the server's git ran a program the sandbox named, on the host, with the server's environment%s", leaked)
	}
}

// The terminal's first-run answers are written into the person's CLI
// configuration file, in a home the person's sandbox writes. The server
// follows a link planted there: it reads whatever JSON file the link
// names (the auth file with every person's token, the LinkedIn tokens,
// the server's own claude login file) and writes it, merged, back as the
// person's file, where the sandbox reads it; a link in place of the
// configuration folder makes it write a file into another person's
// notes.
func TestTerminalFirstRunFollowsNoLink(t *testing.T) {
	t.Parallel()
	s, _ := startWithShell(t)
	id := s.newSessionAs(t, "sebastian")
	// The home as the sandbox sees it (it is mounted at /home/<person>).
	conf := clihome.ConfigDir("/home/sebastian")
	authFile := filepath.Join(filepath.Dir(s.state), "auth.json")
	own := filepath.Join(conf, ".claude.json")

	t.Run("reads a file of the server's", func(t *testing.T) {
		if got := s.shell(t, id, "ln -sf "+authFile+" "+own+" && cat "+own+" 2>&1; echo LINKED"); !strings.Contains(got, "LINKED") {
			t.Fatalf("no link: %s", got)
		}
		term := openTerminal(t, s, s.newSessionAs(t, "sebastian"))
		// A server that refuses the link may refuse the terminal too.
		waitFor(t, 120*time.Second, "the CLI's prompt, or the terminal refused", func() bool {
			select {
			case <-term.Closed():
				return true
			default:
				return strings.Contains(term.Text(), "accept edits on")
			}
		})
		endTerminal(t, term)
		if got := s.shell(t, id, "cat "+own); strings.Contains(got, testToken) {
			t.Errorf("the sandbox reads the server's auth file (the API token %q), copied into the person's CLI home", testToken)
		}
	})

	t.Run("writes into another person's folder", func(t *testing.T) {
		petra := s.env.Vault("petra")
		if got := s.shell(t, id, "mv "+conf+" "+conf+".away && ln -s "+petra+" "+conf+" && echo LINKED"); !strings.Contains(got, "LINKED") {
			t.Fatalf("no link: %s", got)
		}
		term := openTerminal(t, s, s.newSessionAs(t, "sebastian"))
		waitFor(t, 120*time.Second, "the terminal to start or end", func() bool {
			select {
			case <-term.Closed():
				return true
			default:
				return term.Text() != ""
			}
		})
		endTerminal(t, term)
		if _, err := os.Stat(filepath.Join(petra, ".claude.json")); err == nil {
			t.Errorf("the server wrote %s, in petra's folder", filepath.Join(petra, ".claude.json"))
		}
	})
}

// endTerminal ends the terminal now (no grace time) and waits until the
// server closed the connection.
func endTerminal(tb testing.TB, term *httpapitest.Terminal) {
	tb.Helper()
	select {
	case <-term.Closed():
		return
	default:
	}
	term.Send(tb, websocket.MessageText, []byte(`{"type":"close"}`))
	<-term.Closed()
}

// An owner's MCP server that names a folder holding the server's own
// claude login file (the gateway's credential when no key is in the
// environment: $CLAUDE_CONFIG_DIR/.credentials.json or
// ~/.claude/.credentials.json), such as the owner's home given to a
// file server, gets it mounted in every sandbox of the person: the
// sandbox keeps out the vault, the state and configuration folders, the
// auth and LinkedIn files, but not the credential, nor the CLI home all
// persons shared before (their old transcripts).
func TestOwnersMCPServerNeverShowsTheServersCredential(t *testing.T) {
	t.Parallel()
	s, conf := startWithShell(t)
	login := filepath.Join(s.env.Home, ".claude", ".credentials.json")
	if err := os.MkdirAll(filepath.Dir(login), 0o700); err != nil {
		t.Fatal(err)
	}
	const secret = "sk-ant-oat01-the-servers-login"
	writeFile(t, login, `{"claudeAiOauth":{"accessToken":"`+secret+`","refreshToken":"sk-ant-ort01-refresh"}}`)
	// The owner names their home (the server's HOME) for the probe.
	shellConfig(t, conf, s.env.Home)
	id := s.newSessionAs(t, "sebastian")
	if got := s.shell(t, id, "cat "+login+" 2>&1"); strings.Contains(got, secret) {
		t.Errorf("the person's sandbox reads the server's claude login file %s", login)
	}
}

// Every process in a sandbox runs as the same user as the CLI and sees it
// in its /proc: the CLI's stdout is a pipe to the server, which any of
// them opens for writing (/proc/<pid>/fd/1) and speaks the control
// protocol on as if it were the CLI. The server answers an mcp_message
// for its own LinkedIn server without asking anyone: a post goes out in
// the person's name, although posting asks the person first (no
// auto-publish), and no tool call, card or confirmation ever shows.
func TestSandboxedCodeNeverPublishesUnasked(t *testing.T) {
	t.Parallel()
	s, _ := startWithShell(t)
	id := s.newSessionAs(t, "sebastian")
	call, _ := json.Marshal(map[string]any{"type": "control_request", "request_id": "from-the-sandbox",
		"request": map[string]any{"subtype": "mcp_message", "server_name": "linkedin",
			"message": map[string]any{"jsonrpc": "2.0", "id": 99, "method": "tools/call",
				"params": map[string]any{"name": "linkedin_post", "arguments": map[string]any{"text": "Posted without asking"}}}}})
	// The shell's parent is the probe, the probe's parent the CLI.
	cli := `$(awk '{print $4}' /proc/$PPID/stat)`
	if got := s.shell(t, id, "printf '%s\\n' '"+string(call)+"' > /proc/"+cli+"/fd/1 && echo SENT"); !strings.Contains(got, "SENT") {
		t.Fatalf("could not write to the CLI's stdout: %s", got)
	}
	// The next turn runs after the server read the line.
	s.shell(t, id, "true")
	if n := liPosts(s); n != 0 {
		t.Errorf("LinkedIn got %d posts that no one approved", n)
	}
}
