package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/majorhq/major/clihome"
	"github.com/majorhq/major/clitest"
	"github.com/majorhq/major/httpapi/httpapitest"
	"github.com/majorhq/major/internal/procgroup"
)

// The boundary is the kernel's: what a person's CLI runs, whether a
// tool the guard checks, an owner's MCP server the guard cannot look
// into, or the terminal's shell the guard never sees, can read no other
// person's notes and none of the server's files or credentials, and can
// write nowhere but the person's own folder. Each attack here worked
// before the sandbox.
func TestSandboxHoldsTheBoundary(t *testing.T) {
	t.Parallel()
	conf := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	probe, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{"probe": map[string]any{
		"command": self, "args": []string{"-test.run=^$"}, "env": map[string]string{probeEnv: "1"},
	}}})
	writeConfig(t, conf, map[string]string{
		"persons/sebastian/mcp.json":    string(probe),
		"persons/sebastian/config.json": `{"tools":{"allow":["mcp__probe"]}}`,
	})
	s := start(t, "--config-dir", conf)
	const petraSecret = "PETRA-SECRET-NOTE"
	petraNote := filepath.Join(s.env.Vault("petra"), "secret.md")
	writeFile(t, petraNote, petraSecret+"\n")
	dir := filepath.Dir(s.state)
	authFile, liFile := filepath.Join(dir, "auth.json"), filepath.Join(dir, "linkedin.json")
	// What must never show inside: another person's note, the server's
	// token and LinkedIn token, and the Anthropic API key.
	secrets := map[string]string{
		"petra's note":     petraSecret,
		"the API token":    testToken,
		"the LinkedIn key": "li-token-sebastian",
		"the model key":    "test-key",
	}
	leaks := func(t *testing.T, where, text string) {
		t.Helper()
		for what, secret := range secrets {
			if strings.Contains(text, secret) {
				t.Errorf("%s shows %s", where, what)
			}
		}
	}

	// An MCP tool whose path field the guard does not know (location)
	// reads what its server can open: nothing of petra's or the server's.
	t.Run("an owner's MCP server", func(t *testing.T) {
		id := s.newSessionAs(t, "sebastian")
		for _, p := range []string{petraNote, authFile, liFile, filepath.Join(s.state, "persons", "sebastian", "usage.json")} {
			got := s.chatIn(t, "sebastian", id, `[[tool mcp__probe__readfile {"location":"`+p+`"}]]`)
			if !strings.Contains(got, "PROBE-READ") {
				t.Fatalf("the probe did not answer: %q", got)
			}
			leaks(t, "the probe reading "+p, got)
			if !strings.Contains(got, "no such file") {
				t.Errorf("the probe reading %s: %q, want it not to exist", p, got)
			}
		}
		// Its own folder it reads.
		mine := filepath.Join(s.env.Vault("sebastian"), "mine.md")
		writeFile(t, mine, "MINE")
		if got := s.chatIn(t, "sebastian", id, `[[tool mcp__probe__readfile {"location":"`+mine+`"}]]`); !strings.Contains(got, "MINE") {
			t.Errorf("the probe cannot read the person's own note: %q", got)
		}
	})

	// Every CLI process and everything it started holds no credential in
	// its environment: not the model's key, not the server's tokens.
	t.Run("no credential in any environment", func(t *testing.T) {
		id := s.newSessionAs(t, "sebastian")
		// A live CLI with its MCP server running.
		if got := s.chatIn(t, "sebastian", id, `[[tool mcp__probe__whereami {}]]`); !strings.Contains(got, "PROBE-CWD") {
			t.Fatalf("no probe: %q", got)
		}
		if n := environsClean(t, s.env.VaultRoot, leaks); n < 3 {
			t.Errorf("found %d processes in sandboxes; want bwrap, the CLI and its MCP server at least", n)
		}
	})

	// The terminal's shell mode runs commands no tool call shows the
	// guard: they read and write only what the sandbox holds.
	t.Run("the terminal's shell", func(t *testing.T) {
		id := s.newSessionAs(t, "sebastian")
		term := openTerminal(t, s, id)
		defer term.Close()
		waitFor(t, 120*time.Second, "the CLI's prompt", func() bool { return strings.Contains(term.Text(), "accept edits on") })
		outside := filepath.Join(s.state, "written-from-the-shell")
		shell := func(cmd, marker string) string {
			t.Helper()
			term.Type(t, "!")
			submit(t, term, cmd+"; echo "+marker+"-$((6*7))", "the shell's "+marker, func() bool { return strings.Contains(term.Text(), marker+"-42") })
			time.Sleep(500 * time.Millisecond)
			return term.Text()
		}
		// (The state directory itself shows inside: the terminal's hook
		// socket and settings are mounted at their paths in it; nothing
		// else of it is there.)
		screen := shell("cat "+petraNote+" "+authFile+" "+liFile+" "+filepath.Join(s.state, "persons", "sebastian", "usage.json")+" 2>&1 | tr -s '\\n' ' '; ls "+filepath.Join(s.state, "persons")+" 2>&1; echo x > "+outside, "READ")
		leaks(t, "the terminal's shell", screen)
		if n := strings.Count(screen, "No such file"); n < 5 {
			t.Errorf("the shell could open %d of the five: %s", 5-n, screen)
		}
		screen = shell("env | tr '\\n' ' '", "ENV")
		leaks(t, "the terminal's shell", screen)
		if strings.Contains(screen, "MAJOR_") {
			t.Errorf("a variable of the server's inside: %s", screen)
		}
		// The terminal's claude and its shell, while they run.
		if n := environsClean(t, s.env.VaultRoot, leaks); n < 2 {
			t.Errorf("found %d processes in sandboxes; want bwrap and the terminal's claude", n)
		}
		if _, err := os.Stat(outside); err == nil {
			t.Errorf("the shell wrote %s", outside)
		}
	})
}

// environsClean checks with leaks the environment of every sandbox of
// the server whose vault root is root (bwrap and everything under it:
// CLIs, MCP servers, shells, hook commands), and that none holds a
// MAJOR_ variable; it returns how many processes it checked. (Tests of
// other packages run sandboxes of their own with a key of their own.)
func environsClean(t *testing.T, root string, leaks func(t *testing.T, where, text string)) int {
	t.Helper()
	seen := 0
	for _, pid := range procgroup.All() {
		if !sandboxedIn(pid, root) {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "environ"))
		if err != nil {
			continue // gone meanwhile
		}
		seen++
		args := procgroup.Args(pid)
		leaks(t, "the environment of "+strings.Join(args[:min(len(args), 1)], " "), string(env))
		for _, kv := range strings.Split(string(env), "\x00") {
			if strings.HasPrefix(kv, "MAJOR_") {
				t.Errorf("pid %d has %s", pid, kv)
			}
		}
	}
	return seen
}

// sandboxedIn reports whether pid is a bwrap that works in a folder under
// root, or runs under one.
func sandboxedIn(pid int, root string) bool {
	for range 16 {
		args := procgroup.Args(pid)
		if len(args) > 0 && filepath.Base(args[0]) == "bwrap" {
			for i, a := range args {
				if a == "--chdir" && i+1 < len(args) && strings.HasPrefix(args[i+1], root+"/") {
					return true
				}
			}
			return false
		}
		p, ok := procgroup.Read(pid)
		if !ok || p.PPID <= 1 {
			return false
		}
		pid = p.PPID
	}
	return false
}

// sandboxed reports whether pid is a bwrap or runs under one.
func sandboxed(pid int) bool {
	for range 16 {
		args := procgroup.Args(pid)
		if len(args) > 0 && filepath.Base(args[0]) == "bwrap" {
			return true
		}
		p, ok := procgroup.Read(pid)
		if !ok || p.PPID <= 1 {
			return false
		}
		pid = p.PPID
	}
	return false
}

// A state directory written before per-person homes (every CLI ran with
// the server's HOME, so every transcript sits in that one home) resumes:
// at start each person's conversations move into their own home, and the
// next message continues the conversation with its whole history.
func TestConversationsMoveIntoTheirPersonsHome(t *testing.T) {
	t.Parallel()
	s := start(t)
	id := s.newSessionAs(t, "sebastian")
	if got := s.chatIn(t, "sebastian", id, "[[say noted]] EARLIER-MESSAGE"); !strings.Contains(got, "noted") {
		t.Fatalf("first turn: %q", got)
	}
	s.stop(t)
	// The layout an earlier server left: the conversation in the shared
	// CLI home, no homes of persons.
	project := clihome.ProjectName(s.env.Vault("sebastian"))
	own := filepath.Join(clihome.ConfigDir(clihome.Home(s.state, "sebastian")), "projects", project)
	shared := filepath.Join(s.env.Home, ".claude", "projects", project)
	if err := os.MkdirAll(filepath.Dir(shared), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(own, shared); err != nil {
		t.Fatalf("the conversation was not in the person's home: %v", err)
	}
	for _, p := range []string{"sebastian", "petra"} {
		if err := os.RemoveAll(filepath.Join(s.state, "persons", p, "home")); err != nil {
			t.Fatal(err)
		}
	}

	s = restart(t, s)
	got := s.chatIn(t, "sebastian", id, "[[recall]]")
	if !strings.Contains(got, "EARLIER-MESSAGE") {
		t.Errorf("the resumed conversation lost its history: %q", got)
	}
	if _, err := os.Stat(shared); err == nil {
		t.Error("the conversation is still in the shared home")
	}
}

// Without bwrap the server does not start, and says how to install it or
// how to run without the boundary; with --sandbox=off it starts, /readyz
// and the log say the vault guard is the only boundary, the CLIs run (on
// the host, through the gateway all the same), and the terminal, whose
// shell would be a shell on the server, is refused.
func TestSandboxOffOrMissing(t *testing.T) {
	t.Parallel()
	t.Run("no bwrap", func(t *testing.T) {
		env := clitest.New(t, nil)
		dir := t.TempDir()
		authFile := filepath.Join(dir, "auth.json")
		writeFile(t, authFile, `{"tokens": {"`+testToken+`": ["sebastian"]}}`)
		// A PATH with the tools a server needs (git) but no bwrap.
		bin := filepath.Join(dir, "bin")
		if err := os.MkdirAll(bin, 0o755); err != nil {
			t.Fatal(err)
		}
		git, err := exec.LookPath("git")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(git, filepath.Join(bin, "git")); err != nil {
			t.Fatal(err)
		}
		var logs clitest.Buffer
		err = run(context.Background(), []string{"serve", "--addr", "127.0.0.1:0", "--vault-root", env.VaultRoot,
			"--state-dir", filepath.Join(dir, "state"), "--config-dir", filepath.Join(dir, "config"), "--claude", env.Binary,
			"--auth-file", authFile}, testEnviron(env, "PATH="+bin), &logs, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "bubblewrap") || !strings.Contains(err.Error(), "--sandbox=off") {
			t.Fatalf("the server started, or did not say how to fix it: %v", err)
		}
	})

	t.Run("off", func(t *testing.T) {
		s := start(t, "--sandbox", "off")
		if !strings.Contains(s.logs.String(), "SANDBOX OFF") {
			t.Error("the log does not say the sandbox is off")
		}
		var ready map[string]any
		_ = json.Unmarshal([]byte(readAll(t, s.req(t, "GET", "/readyz", ""))), &ready)
		if ready["sandbox"] != "off" || !strings.Contains(fmt.Sprint(ready["warning"]), "vault guard alone") {
			t.Errorf("/readyz: %v", ready)
		}
		id := s.newSessionAs(t, "sebastian")
		if got := s.chatIn(t, "sebastian", id, "[[say still works]]"); got != "still works" {
			t.Errorf("a turn without the sandbox: %q", got)
		}
		found := 0
		for _, pid := range procgroup.All() {
			if !inVault(pid, s.env.VaultRoot) {
				continue
			}
			found++
			if sandboxed(pid) {
				t.Errorf("pid %d runs in a sandbox with --sandbox=off", pid)
			}
		}
		if found == 0 {
			t.Error("no CLI found in the vault")
		}
		_, status := httpapitest.DialTerminal(t, s.url, id, testToken, "sebastian")
		if status != http.StatusServiceUnavailable {
			t.Errorf("the terminal without the sandbox: %d, want 503", status)
		}
	})
}

// inVault reports whether process pid works in a folder under root (a
// person's CLI, or a program it started there).
func inVault(pid int, root string) bool {
	cwd, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "cwd"))
	return err == nil && (cwd == root || strings.HasPrefix(cwd, root+"/"))
}
