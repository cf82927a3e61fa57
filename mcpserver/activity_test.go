package mcpserver_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/majorhq/major/mcpserver"
)

// TestConcurrentPersonsNeverCross runs two persons' sessions at once, several
// calls each: every call must use its own person's token and author and
// land in its own person's log, with one commit per entry.
func TestConcurrentPersonsNeverCross(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	const perPerson = 8
	var wg sync.WaitGroup
	errs := make(chan error, 2*perPerson)
	for _, person := range []string{"sebastian", "petra"} {
		for i := range perPerson {
			wg.Go(func() {
				msg := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"linkedin_post","arguments":{"text":"%s %d"}}}`, i, person, i)
				permissionCheck(w.srv, person, mcpserver.ToolPost, map[string]any{"text": fmt.Sprintf("%s %d", person, i)})
				out, err := w.srv.HandleMessage(context.Background(), person, []byte(msg))
				if err != nil {
					errs <- err
					return
				}
				if !strings.Contains(string(out), "Posted to LinkedIn: urn:li:share:") || strings.Contains(string(out), "Note:") {
					errs <- fmt.Errorf("%s %d: %s", person, i, out)
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	reqs := w.api.Requests()
	if len(reqs) != 2*perPerson {
		t.Fatalf("LinkedIn requests = %d", len(reqs))
	}
	for _, r := range reqs {
		text, _ := r.Body["commentary"].(string)
		person, _, _ := strings.Cut(text, " ")
		if r.Token != accounts[person].AccessToken || r.Body["author"] != accounts[person].Author {
			t.Errorf("%q was sent with token %q as %v", text, r.Token, r.Body["author"])
		}
	}
	for _, person := range []string{"sebastian", "petra"} {
		log := w.activity(t, person)
		if n := strings.Count(log, "\n- "); n != perPerson {
			t.Errorf("%s's log has %d entries:\n%s", person, n, log)
		}
		other := map[string]string{"sebastian": "petra", "petra": "sebastian"}[person]
		if strings.Contains(log, `"`+other+` `) {
			t.Errorf("%s's log holds %s's posts:\n%s", person, other, log)
		}
		if commits := gitLog(t, w.vault, mcpserver.ActivityLogPath(person)); len(commits) != perPerson {
			t.Errorf("%s's log was committed %d times, want %d", person, len(commits), perPerson)
		}
	}
	gitClean(t, w.vault)
}

// TestLogFailureKeepsResult: the post happened, so a failed commit still
// reports the URN, with a note that keeps the model from posting twice.
func TestLogFailureKeepsResult(t *testing.T) {
	t.Parallel()
	w := newWorld(t, func(c *mcpserver.Config, w *world) {
		// A real git sync of a folder that is no repository.
		c.ActivityLog = newAuditLog(t, w.vault, filepath.Join(t.TempDir(), "not-a-repo"))
	})
	ts := startTools(t, w, "sebastian")
	text, isErr := callTool(t, ts, mcpserver.ToolPost, map[string]any{"text": "hello"})
	if isErr {
		t.Fatalf("a log failure turned the post into an error: %q", text)
	}
	if !strings.HasPrefix(text, "Posted to LinkedIn: urn:li:share:7001\n\nNote: this is live on LinkedIn, but recording it in the activity log failed (activity log: git find upstream") ||
		!strings.HasSuffix(text, "Do not publish it again.") {
		t.Fatalf("text = %q", text)
	}
	// The entry itself is still written for the next successful commit.
	if log := w.activity(t, "sebastian"); !strings.Contains(log, `post urn:li:share:7001 "hello"`) {
		t.Fatalf("log:\n%s", log)
	}
}

func TestNoActivityLogSkipsLog(t *testing.T) {
	t.Parallel()
	w := newWorld(t, func(c *mcpserver.Config, _ *world) { c.ActivityLog = nil })
	ts := startTools(t, w, "petra")
	if text, isErr := callTool(t, ts, mcpserver.ToolPost, map[string]any{"text": "hi"}); isErr || text != "Posted to LinkedIn: urn:li:share:7001" {
		t.Fatalf("isError=%v text=%q", isErr, text)
	}
	if log := w.activity(t, "petra"); log != "" {
		t.Fatalf("log written without an activity log: %s", log)
	}
}

func TestLogFormat(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	ts := startTools(t, w, "petra")
	callTool(t, ts, mcpserver.ToolPost, map[string]any{"text": "line one\nline \"two\"\t- [x] not a list"})
	callTool(t, ts, mcpserver.ToolPostComment, map[string]any{"post_urn": "urn:li:share:7001", "text": "c"})
	want := "# LinkedIn activity\n\nWritten by Major for every post, comment and reply.\n\n" +
		"- 2026-01-18T14:32:15Z post urn:li:share:7001 \"line one\\nline \\\"two\\\"\\t- [x] not a list\"\n" +
		"- 2026-01-18T14:32:15Z comment urn:li:comment:(urn:li:activity:7001,7002) on urn:li:share:7001 \"c\"\n"
	if got := w.activity(t, "petra"); got != want {
		t.Fatalf("log:\n%s\nwant:\n%s", got, want)
	}
	commits := gitLog(t, w.vault, mcpserver.ActivityLogPath("petra"))
	wantCommits := []string{
		"LinkedIn comment urn:li:comment:(urn:li:activity:7001,7002) (petra)",
		"LinkedIn post urn:li:share:7001 (petra)",
	}
	if strings.Join(commits, "|") != strings.Join(wantCommits, "|") {
		t.Fatalf("commits = %q", commits)
	}
}
