package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/clitest"
	"github.com/majorhq/major/hooks"
	"github.com/majorhq/major/linkedin/linkedintest"
	"github.com/majorhq/major/mcpserver"
	"github.com/majorhq/major/supervisor"
	"github.com/majorhq/major/vault"
)

// guardedSession is a real CLI session of person with the file tools, the
// vault guard and the LinkedIn server wired as the server wires them, and a
// client that allows every permission prompt (and tells the LinkedIn
// server of each post let through, as the relay does): only the guard
// stands between the model and the files.
func guardedSession(tb testing.TB, env *clitest.Env, srv *mcpserver.Server, person string) (*supervisor.CLI, *clitest.Recorder) {
	tb.Helper()
	h := hooks.New(hooks.Config{VaultRoot: env.VaultRoot, Logger: zerolog.New(zerolog.NewTestWriter(tb)).Level(zerolog.WarnLevel)})
	post := mcpserver.QualifiedName(mcpserver.ToolPost)
	rec := clitest.NewRecorder()
	s := supervisor.NewCLI(supervisor.CLIConfig{
		ID: "s-" + person, Person: person, Dir: env.Vault(person),
		Spec: supervisor.Spec{
			Binary:         env.Binary,
			Sandbox:        env.Sandbox(tb, person),
			Env:            env.ChildEnv(),
			SystemPrompt:   "You are a test assistant.",
			Tools:          []string{"Read", "Write", "Edit", "Glob", post},
			PermissionMode: "acceptEdits",
			SDKMCPServers:  []string{mcpserver.ServerName},
			Hooks:          h.Matchers(),
			ExtraArgs:      hooks.IsolationArgs(),
			Grace:          2 * time.Second,
		},
		Handlers: func(sess *supervisor.CLI) supervisor.Handlers {
			return supervisor.Handlers{
				// As the relay does for a person who publishes without
				// asking: the post passes the permission check, which
				// tells the LinkedIn server so.
				CanUseTool: func(_ context.Context, req *supervisor.ControlRequest) (supervisor.PermissionResult, error) {
					if req.ToolName == post {
						srv.Approve(person, mcpserver.ToolPost, req.Input)
					}
					return supervisor.PermissionResult{Allow: true, UpdatedInput: req.Input}, nil
				},
				HookCallback: func(ctx context.Context, req *supervisor.ControlRequest) (json.RawMessage, error) {
					return h.Handle(ctx, sess, req)
				},
				MCPMessage: func(ctx context.Context, server string, msg json.RawMessage) (json.RawMessage, error) {
					if server != mcpserver.ServerName {
						return nil, fmt.Errorf("unknown MCP server %q", server)
					}
					return srv.HandleMessage(ctx, sess.Person(), msg)
				},
			}
		},
		Sink:   rec,
		Logger: zerolog.New(zerolog.NewTestWriter(tb)).Level(zerolog.WarnLevel),
	})
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("close session: %v", err)
		}
	})
	return s, rec
}

// folderOf maps each file in dir to its content.
func folderOf(tb testing.TB, dir string) map[string]string {
	tb.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			tb.Fatal(err)
		}
		out[e.Name()] = string(b)
	}
	return out
}

func toolTurn(tool string, input map[string]any) string {
	in, _ := json.Marshal(input)
	return "[[tool " + tool + " " + string(in) + "]]"
}

// activityLogCannotBeForged runs on s, sebastian's session through the real
// CLI with every permission prompt allowed, after its first post: the model
// tries to rewrite, empty and edit its LinkedIn activity log by every path;
// the log and its git history stay as the server wrote them. Then links are
// planted where the log goes (as a pulled commit could carry them; the model
// has no tool that makes one): the next post goes through, the log reports
// the failure, and nothing is written through a link into the person's
// vault.
func activityLogCannotBeForged(t *testing.T, env *clitest.Env, api *linkedintest.Server, s *supervisor.CLI, rec *clitest.Recorder) {
	post := mcpserver.QualifiedName(mcpserver.ToolPost)
	rel := mcpserver.ActivityLogPath("sebastian")
	abs := filepath.Join(env.VaultRoot, rel)
	logged := readFile(t, abs)
	commits := gitLog(t, env.VaultRoot, rel)
	posts := len(api.Requests())
	// The folder of the logs, petra's included.
	around := folderOf(t, filepath.Dir(abs))

	fromVault, err := filepath.Rel(env.Vault("sebastian"), abs)
	if err != nil {
		t.Fatal(err)
	}
	attacks := []struct {
		name, tool string
		input      map[string]any
	}{
		{"rewrite by absolute path", "Write", map[string]any{"file_path": abs, "content": "# LinkedIn activity\n\n- forged\n"}},
		{"empty by relative path", "Write", map[string]any{"file_path": fromVault, "content": ""}},
		{"edit an entry", "Edit", map[string]any{"file_path": abs, "old_string": `"first"`, "new_string": `"forged"`}},
		{"rewrite through dot-dot", "Write", map[string]any{"file_path": "notes/../" + fromVault, "content": ""}},
		{"plant a file next to it", "Write", map[string]any{"file_path": filepath.Join(filepath.Dir(abs), "petra.md"), "content": "- forged\n"}},
	}
	for _, a := range attacks {
		// The CLI writes an existing file only after reading it, so each
		// attack reads first: the guard denies that too.
		if got := rec.Turn(t, s, toolTurn("Read", map[string]any{"file_path": a.input["file_path"]})); !strings.Contains(got, "Access denied") {
			t.Errorf("%s: reading, the model saw %q", a.name, got)
		}
		got := rec.Turn(t, s, toolTurn(a.tool, a.input))
		// The guard denies; or the sandbox, which holds no audit log, makes
		// the CLI find no file to edit before it asks the guard.
		if !strings.Contains(got, "Access denied") && !strings.Contains(got, "File has not been read yet") && !strings.Contains(got, "File does not exist") {
			t.Errorf("%s: the model saw %q", a.name, got)
		}
		if now := readFile(t, abs); now != logged {
			t.Fatalf("%s changed the log:\n%s", a.name, now)
		}
	}
	if got := folderOf(t, filepath.Dir(abs)); !maps.Equal(got, around) {
		t.Fatalf("the logs' folder changed: %q, was %q", got, around)
	}

	notes := filepath.Join(env.Vault("sebastian"), "notes.md")
	if err := os.WriteFile(notes, []byte("mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	links := []struct {
		name, link, target string
	}{
		{"log file", abs, notes},
		{"log folder", filepath.Dir(abs), env.Vault("sebastian")},
		{"audit folder", filepath.Join(env.VaultRoot, vault.AuditDir), env.Vault("sebastian")},
	}
	for i, l := range links {
		aside := l.link + ".real"
		if err := os.Rename(l.link, aside); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(l.target, l.link); err != nil {
			t.Fatal(err)
		}
		text := fmt.Sprintf("through a link %d", i)
		got := rec.Turn(t, s, toolTurn(post, map[string]any{"text": text}))
		if !strings.Contains(got, "Posted to LinkedIn: urn:li:share:") || !strings.Contains(got, "recording it in the activity log failed") {
			t.Errorf("%s: the model saw %q", l.name, got)
		}
		if data := readFile(t, notes); data != "mine\n" {
			t.Fatalf("%s: written through the link into the vault: %q", l.name, data)
		}
		entries, _ := os.ReadDir(env.Vault("sebastian"))
		if len(entries) != 1 {
			t.Fatalf("%s: something was created in the vault: %v", l.name, entries)
		}
		if err := os.Remove(l.link); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(aside, l.link); err != nil {
			t.Fatal(err)
		}
	}
	if now := readFile(t, abs); now != logged {
		t.Fatalf("the log changed:\n%s", now)
	}
	if got := gitLog(t, env.VaultRoot, rel); strings.Join(got, "|") != strings.Join(commits, "|") {
		t.Fatalf("log commits %q, want %q", got, commits)
	}
	if n := len(api.Requests()); n != posts+len(links) {
		t.Fatalf("LinkedIn got %d posts", n)
	}
}
