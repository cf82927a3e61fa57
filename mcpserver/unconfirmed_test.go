package mcpserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/majorhq/major/linkedin"
	"github.com/majorhq/major/linkedin/linkedintest"
	"github.com/majorhq/major/mcpserver"
)

// clock is a settable time for the record of unconfirmed publishes.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// TestRepeatOfUnknownOutcome: after LinkedIn left open whether a post,
// comment or reply was published (a gateway error after applying it, with
// a listing that lags), it is not sent again, the model learns where to
// check, and an identical one of the same person is refused for a day:
// in a session unless the person approved that very call again, over
// HTTP always, after a restart too. A different text, another target or
// another person is not refused.
func TestRepeatOfUnknownOutcome(t *testing.T) {
	t.Parallel()
	const post = "urn:li:activity:555"
	const parent = "urn:li:comment:(urn:li:activity:555,1)"
	calls := []struct {
		tool  string
		args  map[string]any
		where string
	}{
		{mcpserver.ToolPost, map[string]any{"text": "Unsure words"}, "LinkedIn activity page"},
		{mcpserver.ToolPostComment, map[string]any{"post_urn": post, "text": "Unsure words"}, "the comments under https://www.linkedin.com/feed/update/" + post + "/"},
		{mcpserver.ToolReplyComment, map[string]any{"post_urn": post, "comment_urn": parent, "text": "Unsure words"}, "the replies to " + parent},
	}
	for _, c := range calls {
		t.Run(c.tool, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "state")
			clk := &clock{now: fixedNow}
			record := func(t *testing.T) *mcpserver.Unconfirmed {
				t.Helper()
				u, err := mcpserver.OpenUnconfirmed(path, clk.Now)
				if err != nil {
					t.Fatal(err)
				}
				return u
			}
			w := newWorld(t, func(cfg *mcpserver.Config, w *world) {
				cfg.Unconfirmed = record(t)
				// Publishing over HTTP needs a person who publishes
				// without asking.
				cfg.AutoPublish = func(string) bool { return true }
			})
			ts := startTools(t, w, "sebastian")
			sent := func() int {
				n := 0
				for _, r := range w.api.Requests() {
					if r.Method == http.MethodPost {
						n++
					}
				}
				return n
			}
			with := func(text string) map[string]any {
				args := map[string]any{}
				for k, v := range c.args {
					args[k] = v
				}
				args["text"] = text
				return args
			}
			raw := func(args map[string]any) json.RawMessage {
				b, _ := json.Marshal(args)
				return b
			}

			// LinkedIn applies it, answers 502, and lists it only much later.
			w.api.SetListingLag(time.Hour)
			w.api.Enqueue(linkedintest.Response{Status: 502, Apply: true, Method: http.MethodPost})
			text, isErr := callTool(t, ts, c.tool, c.args)
			if !isErr || !strings.Contains(text, "outcome is unknown") || !strings.Contains(text, c.where) || !strings.Contains(text, "not sent again") {
				t.Fatalf("first call: isError=%v %q", isErr, text)
			}
			if sent() != 1 {
				t.Fatalf("sent %d times", sent())
			}
			if log := w.activity(t, "sebastian"); !strings.Contains(log, `(outcome unknown)`) || !strings.Contains(log, `"Unsure words"`) {
				t.Fatalf("activity log:\n%s", log)
			}
			if _, ok := w.srv.Unconfirmed("sebastian", c.tool, raw(c.args)); !ok {
				t.Fatal("the unknown outcome is not on record")
			}

			// The identical call again, also spaced differently: refused.
			for _, again := range []map[string]any{c.args, with("  Unsure   words \n")} {
				text, isErr = callTool(t, ts, c.tool, again)
				if !isErr || !strings.Contains(text, "refused: an identical") || !strings.Contains(text, c.where) {
					t.Fatalf("the repeat: isError=%v %q", isErr, text)
				}
			}
			// Over HTTP, even with an approval.
			w.srv.Approve("sebastian", c.tool, raw(c.args))
			hc := httpClient(t, relayStandIn(t, w.srv.HTTPHandler()), "relay-token-seb")
			var req mcp.CallToolRequest
			req.Params.Name, req.Params.Arguments = c.tool, c.args
			res, err := hc.CallTool(context.Background(), req)
			if err != nil || !res.IsError || !strings.Contains(resultText(t, res), "cannot be approved from /mcp") {
				t.Fatalf("the repeat over HTTP: %v %+v", err, res)
			}
			if sent() != 1 {
				t.Fatalf("a repeat was sent: %d", sent())
			}
			// A different text is not refused.
			if text, isErr = callTool(t, ts, c.tool, with("Other words")); isErr {
				t.Fatalf("a different text: %q", text)
			}

			// The record outlives a restart: a new server on the same
			// state refuses the repeat too.
			restarted := &world{api: w.api, vault: w.vault, srv: mcpserver.New(mcpserver.Config{
				LinkedIn: linkedin.New(linkedin.Config{BaseURL: w.api.URL,
					Sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() }}),
				Accounts: accounts, Unconfirmed: record(t), Now: clk.Now})}
			if text, isErr = callTool(t, startTools(t, restarted, "sebastian"), c.tool, c.args); !isErr || !strings.Contains(text, "refused: an identical") {
				t.Fatalf("the repeat after a restart: isError=%v %q", isErr, text)
			}
			// The person approves this very call again: it goes out once.
			w.srv.Approve("sebastian", c.tool, raw(c.args))
			before := sent()
			if text, isErr = callTool(t, ts, c.tool, c.args); isErr || sent() != before+1 {
				t.Fatalf("the approved repeat: isError=%v %q", isErr, text)
			}
			// The approval was used up, but the repeat was confirmed: the
			// record is gone.
			if _, ok := w.srv.Unconfirmed("sebastian", c.tool, raw(c.args)); ok {
				t.Fatal("a confirmed repeat left the record")
			}

			// A day later an unknown outcome no longer refuses.
			w.api.Enqueue(linkedintest.Response{Status: 504, Method: http.MethodPost})
			if text, isErr = callTool(t, ts, c.tool, with("Later words")); !isErr || !strings.Contains(text, "outcome is unknown") {
				t.Fatalf("second unknown outcome: %q", text)
			}
			clk.add(mcpserver.RepeatWindow)
			if text, isErr = callTool(t, ts, c.tool, with("Later words")); isErr {
				t.Fatalf("a repeat after the window: %q", text)
			}
		})
	}
}
