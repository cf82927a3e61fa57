package hooks_test

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/rs/zerolog"

	"github.com/majorhq/major/clitest"
	"github.com/majorhq/major/hooks"
	"github.com/majorhq/major/supervisor"
	"github.com/majorhq/major/vault"
)

// filesServer is an MCP server with one tool, save, that writes any file
// it is given: a tool the guard knows nothing about, so only its path field
// tells the guard what it does.
func filesServer(dir string) *server.MCPServer {
	s := server.NewMCPServer("files", "1.0.0", server.WithToolCapabilities(false))
	s.AddTool(mcp.NewTool("save",
		mcp.WithDescription("Save a file."),
		mcp.WithString("path", mcp.Required()),
		mcp.WithString("content", mcp.Required()),
	), func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		p := req.GetString("path", "")
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return mcp.NewToolResultError(err.Error()), nil
		}
		if err := os.WriteFile(p, []byte(req.GetString("content", "")), 0o644); err != nil {
			return mcp.NewToolResultError(err.Error()), nil
		}
		return mcp.NewToolResultText("saved " + p), nil
	})
	return s
}

// startPermissive is a session of person whose permission prompts are all
// allowed, as if an attached client said "Allow" to each, so the vault
// guard is the only thing between the model and the files. It sees the
// file tools (this CLI has no MultiEdit any more; TestGuardCheck covers
// it) and the files server's save tool.
func startPermissive(tb testing.TB, env *clitest.Env, person string, h *hooks.Hooks, asked *atomic.Int64) (*supervisor.CLI, *clitest.Recorder) {
	tb.Helper()
	files := filesServer(env.Vault(person))
	rec := clitest.NewRecorder()
	s := supervisor.NewCLI(supervisor.CLIConfig{
		ID: "attack", Person: person, Dir: env.Vault(person),
		Spec: supervisor.Spec{
			Binary:         env.Binary,
			Sandbox:        env.Sandbox(tb, person),
			Env:            env.ChildEnv(),
			SystemPrompt:   "You are a test assistant.",
			Tools:          []string{"Read", "Write", "Edit", "NotebookEdit", "mcp__files__save"},
			PermissionMode: "default",
			SDKMCPServers:  []string{"files"},
			Hooks:          h.Matchers(),
			ExtraArgs:      hooks.IsolationArgs(),
			Grace:          2 * time.Second,
		},
		Handlers: func(s *supervisor.CLI) supervisor.Handlers {
			return supervisor.Handlers{
				CanUseTool: func(_ context.Context, req *supervisor.ControlRequest) (supervisor.PermissionResult, error) {
					asked.Add(1)
					return supervisor.PermissionResult{Allow: true, UpdatedInput: req.Input}, nil
				},
				HookCallback: func(ctx context.Context, req *supervisor.ControlRequest) (json.RawMessage, error) {
					return h.Handle(ctx, s, req)
				},
				MCPMessage: func(ctx context.Context, _ string, msg json.RawMessage) (json.RawMessage, error) {
					resp := files.HandleMessage(ctx, msg)
					if resp == nil {
						return json.RawMessage(`{"jsonrpc":"2.0","id":0,"result":{}}`), nil
					}
					return json.Marshal(resp)
				},
			}
		},
		Sink:   rec,
		Logger: zerolog.New(zerolog.NewTestWriter(tb)).Level(zerolog.ErrorLevel),
	})
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("close session: %v", err)
		}
	})
	return s, rec
}

// treeOf lists every file and folder under dir, relative to it.
func treeOf(tb testing.TB, dir string) []string {
	tb.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out = append(out, rel)
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// TestGuardDeniesProtectedNamesThroughCLI is the model trying, with every
// permission prompt allowed, to write a name that a case-insensitive,
// Unicode-normalising, 8.3 or stream-aware file system (where the person
// opens the vault) reads as the assistant's configuration or as git's:
// every attempt is denied by the guard, nothing reaches the disk and
// nothing reaches git.
//
// Every attempt is one tool call of a single model message, as a model
// may send many at once; the CLI asks the guard about each.
func TestGuardDeniesProtectedNamesThroughCLI(t *testing.T) {
	t.Parallel()
	env := clitest.New(t, callsModel)
	root := env.VaultRoot
	v := env.Vault("sebastian")
	writeFile(t, filepath.Join(v, "notes.md"), "notes\n")
	git(t, root, "add", ".")
	git(t, root, "commit", "-q", "-m", "start")
	// NotebookEdit changes notebooks that exist: these were put there
	// before (by hand, on a machine without the guard), kept out of git.
	notebook := `{"cells":[{"cell_type":"markdown","id":"a1","metadata":{},"source":["NOTEBOOK-CELL"]}],"metadata":{},"nbformat":4,"nbformat_minor":5}`
	for _, nb := range []string{".Claude/n.ipynb", "sub/.GIT/n.ipynb"} {
		writeFile(t, filepath.Join(v, nb), notebook)
	}
	writeFile(t, filepath.Join(root, ".git", "info", "exclude"), "*.ipynb\n")
	g := newGitSync(t, vault.GitConfig{Root: root})
	h := newHooks(t, root, g)
	var asked atomic.Int64
	s, rec := startPermissive(t, env, "sebastian", h, &asked)
	before := treeOf(t, v)

	write := func(p string) map[string]any { return map[string]any{"file_path": p, "content": "PLANTED\n"} }
	create := func(p string) map[string]any {
		return map[string]any{"file_path": p, "old_string": "", "new_string": "PLANTED\n"}
	}
	cases := []struct {
		tool  string
		input map[string]any
		// read: Read the file first, as the CLI wants before an edit.
		read string
	}{
		{"Write", write("claude.md"), ""},
		{"Write", write("Claude.md"), ""},
		{"Write", write(filepath.Join(v, "cLaUdE.md")), ""},
		{"Write", write("claude.LOCAL.md"), ""},
		{"Write", write(".Claude/settings.json"), ""},
		{"Write", write("sub/.CLAUDE/settings.json"), ""},
		{"Write", write(".MCP.json"), ""},
		{"Write", write("CLAUDE.md."), ""},
		{"Write", write("CLAUDE.md "), ""},
		{"Write", write("CLAUDE.md. . "), ""},
		{"Write", write("CLAUDE.md::$DATA"), ""},
		{"Write", write(".claude:settings.json"), ""},
		{"Write", write(".GIT/x.md"), ""},
		{"Write", write(".Git./config"), ""},
		{"Write", write("GIT~1/config"), ""},
		{"Write", write("git~2/hooks/post-checkout"), ""},
		{"Write", write("CLAUDE~1.MD"), ""},
		{"Write", write("CLAUDE~1/settings.json"), ""},
		{"Write", write("CL1A2B~1.MD"), ""},
		{"Write", write("MCP~1.JSO"), ""},
		{"Write", write("CLAUDE\u200d.md"), ""},
		{"Write", write(".cl\u200caude/settings.json"), ""},
		{"Write", write("\ufeff.git/config"), ""},
		{"Write", write(".g\u00adit/config"), ""},
		{"Write", write("\uff23\uff2c\uff21\uff35\uff24\uff25.md"), ""}, // fullwidth CLAUDE
		{"Write", write(".mcp.j\u017fon"), ""},                          // long s
		{"Write", write(".g\u0131t/config"), ""},                        // dotless i
		{"Write", write(".G\u0130T/config"), ""},                        // dotted capital I
		{"Write", write(`sub\.claude\settings.json`), ""},
		{"Write", write(`.git\config`), ""},
		{"Write", write(".gitignore"), ""},
		{"Write", write("sub/.gitignore"), ""},
		{"Write", write(".GitIgnore "), ""},
		{"Write", write(".gitattributes"), ""},
		{"Write", write("deep/er/.gitattributes"), ""},
		{"Write", write(".gitmodules"), ""},
		{"Write", write("GITMOD~1"), ""},
		{"Edit", create("claude.Md"), ""},
		{"Edit", create(".Claude/settings.local.json"), ""},
		{"Edit", create("sub/.GITIGNORE"), ""},
		{"Edit", create("GIT~3/config"), ""},
		{"NotebookEdit", map[string]any{"notebook_path": ".Claude/n.ipynb", "new_source": "PLANTED", "cell_type": "markdown", "edit_mode": "insert"}, ".Claude/n.ipynb"},
		{"NotebookEdit", map[string]any{"notebook_path": "sub/.GIT/n.ipynb", "new_source": "PLANTED", "cell_type": "markdown", "edit_mode": "insert"}, "sub/.GIT/n.ipynb"},
		{"mcp__files__save", map[string]any{"path": ".claude/settings.json", "content": `{"hooks":{}}`}, ""},
		{"mcp__files__save", map[string]any{"path": "CLAUDE.md", "content": "PLANTED"}, ""},
		{"mcp__files__save", map[string]any{"path": "Claude.md", "content": "PLANTED"}, ""},
		{"mcp__files__save", map[string]any{"path": ".gitignore", "content": "*\n"}, ""},
		{"mcp__files__save", map[string]any{"path": ".git/config", "content": "PLANTED"}, ""},
	}
	// NotebookEdit wants the notebook read first.
	for _, tc := range cases {
		if tc.read == "" {
			continue
		}
		if got := rec.Turn(t, s, `[[tool Read {"file_path":"`+tc.read+`"}]]`); !strings.Contains(got, "NOTEBOOK-CELL") {
			t.Fatalf("read %s: %q", tc.read, got)
		}
	}
	var calls []toolCall
	for _, tc := range cases {
		calls = append(calls, toolCall{tc.tool, tc.input})
	}
	for i, got := range callsTurn(t, env.Model, s, rec, calls) {
		if !strings.Contains(got, "Access denied") {
			in, _ := json.Marshal(cases[i].input)
			t.Errorf("%s %s: the model saw %q, want a denial", cases[i].tool, in, got)
		}
	}
	// As the server does after every turn.
	if err := h.CommitTurn(context.Background(), "sebastian", "attack"); err != nil {
		t.Errorf("commit turn: %v", err)
	}
	if after := treeOf(t, v); !slices.Equal(after, before) {
		t.Errorf("the vault changed:\nbefore %q\nafter  %q", before, after)
	}
	for _, nb := range []string{".Claude/n.ipynb", "sub/.GIT/n.ipynb"} {
		if got := readFile(t, filepath.Join(v, nb)); got != notebook {
			t.Errorf("%s changed to %q", nb, got)
		}
	}
	if got := git(t, root, "log", "--all", "--name-only", "--format="); got != "sebastian/notes.md" {
		t.Errorf("paths in the git history:\n%s", got)
	}
	t.Logf("%d permission prompts, all allowed", asked.Load())
}
