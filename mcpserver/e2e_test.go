package mcpserver_test

import (
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/clitest"
	"github.com/majorhq/major/linkedin"
	"github.com/majorhq/major/linkedin/linkedintest"
	"github.com/majorhq/major/mcpserver"
	"github.com/majorhq/major/supervisor"
)

// TestPostThroughRealCLI drives two persons' real CLI sessions at once
// against the scripted model: each asks the model to post, the CLI calls
// the SDK MCP tool through mcp_message, LinkedIn (fake) gets the post with
// that person's token, the model sees the URN, and each person's activity
// log is committed in the vault repository. Sebastian's session then goes
// on with TestActivityLogCannotBeForged's attacks.
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
	recs := map[string]*clitest.Recorder{}
	sessions := map[string]*supervisor.CLI{}
	for _, p := range persons {
		sessions[p], recs[p] = guardedSession(t, env, srv, p)
	}
	for _, p := range persons {
		if err := sessions[p].Send(context.Background(), `[[tool mcp__linkedin__linkedin_post {"text":"hello from `+p+`"}]]`); err != nil {
			t.Fatal(err)
		}
	}
	result := regexp.MustCompile(`^RESULT<<Posted to LinkedIn: (urn:li:share:[0-9]+)>>$`)
	urns := map[string]string{}
	for _, p := range persons {
		end := recs[p].WaitEnd(t, 90*time.Second)
		text := recs[p].Text()
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
	if t.Failed() {
		return
	}
	t.Run("ActivityLogCannotBeForged", func(t *testing.T) {
		activityLogCannotBeForged(t, env, api, sessions["sebastian"], recs["sebastian"])
	})
}
