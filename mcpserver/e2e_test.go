package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/clitest"
	"github.com/majorhq/major/linkedin"
	"github.com/majorhq/major/linkedin/linkedintest"
	"github.com/majorhq/major/mcpserver"
	"github.com/majorhq/major/supervisor"
)

// turnRecorder is a supervisor.Sink that keeps the streamed text of the
// current turn and signals its end.
type turnRecorder struct {
	mu   sync.Mutex
	text strings.Builder
	ends chan supervisor.Event
}

func newTurnRecorder() *turnRecorder { return &turnRecorder{ends: make(chan supervisor.Event, 4)} }

func (r *turnRecorder) Publish(ev supervisor.Event) {
	r.mu.Lock()
	if ev.Kind == supervisor.EventTurnStart {
		r.text.Reset()
	}
	if ev.Kind == supervisor.EventCLI && ev.Msg.Type == "stream_event" && ev.Msg.Event != nil &&
		ev.Msg.Event.Delta != nil && ev.Msg.Event.Delta.Type == "text_delta" {
		r.text.WriteString(ev.Msg.Event.Delta.Text)
	}
	r.mu.Unlock()
	if ev.Kind == supervisor.EventTurnEnd {
		r.ends <- ev
	}
}

func (r *turnRecorder) wait(tb testing.TB, within time.Duration) (supervisor.Event, string) {
	tb.Helper()
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case ev := <-r.ends:
		r.mu.Lock()
		defer r.mu.Unlock()
		return ev, r.text.String()
	case <-t.C:
		tb.Fatalf("turn did not end within %s", within)
		return supervisor.Event{}, ""
	}
}

// linkedinSession is a real CLI session of person whose SDK MCP server
// "linkedin" is srv, wired the way the server wires it.
func linkedinSession(tb testing.TB, env *clitest.Env, srv *mcpserver.Server, person string, rec *turnRecorder) *supervisor.CLI {
	tb.Helper()
	post := mcpserver.QualifiedName(mcpserver.ToolPost)
	s := supervisor.NewCLI(supervisor.CLIConfig{
		ID:     "s-" + person + "-" + strings.ReplaceAll(tb.Name(), "/", "-"),
		Person: person,
		Dir:    env.Vault(person),
		Spec: supervisor.Spec{
			Binary:         env.Binary,
			Env:            env.ChildEnv(),
			SystemPrompt:   "You are a test assistant.",
			Tools:          []string{"Read", post},
			AllowedTools:   []string{post},
			PermissionMode: "acceptEdits",
			SDKMCPServers:  []string{mcpserver.ServerName},
			Grace:          2 * time.Second,
		},
		Handlers: func(sess *supervisor.CLI) supervisor.Handlers {
			return supervisor.Handlers{
				MCPMessage: func(ctx context.Context, server string, msg json.RawMessage) (json.RawMessage, error) {
					if server != mcpserver.ServerName {
						return nil, fmt.Errorf("unknown MCP server %q", server)
					}
					return srv.HandleMessage(ctx, sess.Person(), msg)
				},
			}
		},
		Sink:   rec,
		Logger: zerolog.New(zerolog.NewTestWriter(tb)).Level(zerolog.InfoLevel),
	})
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("close session: %v", err)
		}
	})
	return s
}

// TestPostThroughRealCLI drives two persons' real CLI sessions at once
// against the scripted model: each asks the model to post, the CLI calls
// the SDK MCP tool through mcp_message, LinkedIn (fake) gets the post with
// that person's token, the model sees the URN, and each person's activity
// log is committed in the vault repository.
func TestPostThroughRealCLI(t *testing.T) {
	t.Parallel()
	env := clitest.New(t, nil)
	api := linkedintest.New(t, linkedin.DefaultVersion)
	for _, a := range accounts {
		api.AddAccount(a.AccessToken, a.Author)
	}
	srv := mcpserver.New(mcpserver.Config{
		LinkedIn:    linkedin.New(linkedin.Config{BaseURL: api.URL, Logger: zerolog.New(zerolog.NewTestWriter(t))}),
		Accounts:    accounts,
		ActivityLog: newAuditLog(t, env.VaultRoot, env.VaultRoot),
		Logger:      zerolog.New(zerolog.NewTestWriter(t)),
	})

	persons := []string{"sebastian", "petra"}
	recs := map[string]*turnRecorder{}
	sessions := map[string]*supervisor.CLI{}
	for _, p := range persons {
		recs[p] = newTurnRecorder()
		sessions[p] = linkedinSession(t, env, srv, p, recs[p])
	}
	for _, p := range persons {
		if err := sessions[p].Send(context.Background(), `[[tool mcp__linkedin__linkedin_post {"text":"hello from `+p+`"}]]`); err != nil {
			t.Fatal(err)
		}
	}
	result := regexp.MustCompile(`^RESULT<<Posted to LinkedIn: (urn:li:share:[0-9]+)>>$`)
	urns := map[string]string{}
	for _, p := range persons {
		end, text := recs[p].wait(t, 90*time.Second)
		if end.Err != nil || end.Msg == nil || end.Msg.IsError {
			t.Fatalf("%s's turn: err=%v msg=%+v", p, end.Err, end.Msg)
		}
		m := result.FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("%s: the model saw %q", p, text)
		}
		urns[p] = m[1]
	}
	if urns["sebastian"] == urns["petra"] {
		t.Fatalf("both got %s", urns["sebastian"])
	}

	reqs := api.Requests()
	if len(reqs) != 2 {
		t.Fatalf("LinkedIn requests = %d", len(reqs))
	}
	for _, r := range reqs {
		text, _ := r.Body["commentary"].(string)
		p := strings.TrimPrefix(text, "hello from ")
		if r.Method != "POST" || r.Path != "/rest/posts" || r.Token != accounts[p].AccessToken || r.Body["author"] != accounts[p].Author {
			t.Errorf("LinkedIn got %s %s token %q body %v", r.Method, r.Path, r.Token, r.Body)
		}
	}
	for _, p := range persons {
		log := readFile(t, filepath.Join(env.VaultRoot, mcpserver.ActivityLogPath(p)))
		if !strings.Contains(log, " post "+urns[p]+` "hello from `+p+`"`+"\n") || strings.Count(log, "\n- ") != 1 {
			t.Errorf("%s's activity log:\n%s", p, log)
		}
		commits := gitLog(t, env.VaultRoot, mcpserver.ActivityLogPath(p))
		if len(commits) != 1 || commits[0] != "LinkedIn post "+urns[p]+" ("+p+")" {
			t.Errorf("%s's log commits: %q", p, commits)
		}
	}
}
