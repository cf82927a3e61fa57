package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/majorhq/major/scriptedmodel"
)

// shownEnd is how the server's own text of a held-back post ends: the
// words that would be published, then how to approve them.
func shownEnd(text string) string { return text + "\n\n" + replyYes }

// replyYes is how the server's text of a held-back post ends.
const replyYes = `Reply "yes" to publish it exactly as shown; any other reply cancels it.`

// lastAnswer is the assistant's last entry in the session's compat
// history.
func lastAnswer(tb testing.TB, s *server, id string) string {
	tb.Helper()
	var h struct {
		Messages []struct{ Role, Content string }
	}
	body := readAll(tb, s.req(tb, "GET", "/api/claude/history?session_id="+id, ""))
	if err := json.Unmarshal([]byte(body), &h); err != nil || len(h.Messages) == 0 {
		tb.Fatalf("history: %s", body)
	}
	last := h.Messages[len(h.Messages)-1]
	if last.Role != "assistant" {
		tb.Fatalf("history ends with %+v", last)
	}
	return last.Content
}

// TestDraftShownByServer: a post held back for a seed client is shown to
// the person by the server, as the last text of the turn, and the turn
// ends there: whatever the model says after the held-back call (in the
// same reply or in its next request) never reaches the client, so a "yes"
// can only answer the shown draft. Steps:
//   - the model drafts, then asks something else in its next request: the
//     client's stream and the history end with the server's draft text,
//     the question never arrives; "yes" publishes exactly the shown words,
//     and the model saw that the draft was shown and awaited confirmation;
//   - the same with the question in the draft's own reply;
//   - after a later, different question in a new turn, "yes" publishes
//     nothing.
func TestDraftShownByServer(t *testing.T) {
	t.Parallel()
	const question = "Do you want me to fix the typo in welcome.md?"
	post := func(text string) scriptedmodel.ReplyBlock {
		return scriptedmodel.ReplyBlock{Name: "mcp__linkedin__linkedin_post", Input: map[string]any{"text": text}}
	}
	again := publisher(nil)
	s := startModel(t, func(req scriptedmodel.Request) scriptedmodel.Reply {
		text := req.LastUserText()
		if results := req.ToolResults(); len(results) > 0 && text == "" {
			if strings.Contains(results[0].ResultText(), "Posted to LinkedIn") {
				return scriptedmodel.Script(req)
			}
			// After the held-back call: something else entirely.
			return scriptedmodel.Text(question)
		}
		switch text {
		case "draft, then ask":
			return scriptedmodel.Reply{Blocks: []scriptedmodel.ReplyBlock{post("Shown words")}}
		case "draft and ask in one reply":
			return scriptedmodel.Reply{Blocks: []scriptedmodel.ReplyBlock{post("Second words"), {Text: question}}, ChunkSize: 4}
		case "something else":
			return scriptedmodel.Text(question)
		}
		// "yes": the model calls the last LinkedIn tool again, unchanged.
		return again(req)
	})
	var id string
	shown := func(t *testing.T, out, words string) {
		t.Helper()
		if strings.Contains(out, "typo") || !strings.HasSuffix(out, shownEnd(words)) {
			t.Fatalf("the client's stream does not end with the server's draft: %q", out)
		}
		if got := lastAnswer(t, s, id); got != out || strings.Contains(got, "[Interrupted]") {
			t.Fatalf("history's answer %q, the stream said %q", got, out)
		}
	}
	step := func(name string, f func(t *testing.T)) {
		if !t.Run(name, f) {
			t.FailNow()
		}
	}

	step("a question in the next request never arrives", func(t *testing.T) {
		var out string
		out, id = seedTurn(t, s, true, "draft, then ask", "")
		shown(t, out, "Shown words")
		if liPosts(s) != 0 {
			t.Fatal("published before the person confirmed")
		}
		out, _ = seedTurn(t, s, false, "yes", id)
		reqs := s.li.Requests()
		if liPosts(s) != 1 || reqs[len(reqs)-1].Body["commentary"] != "Shown words" || !strings.Contains(out, "Posted to LinkedIn") {
			t.Fatalf("after yes: %d posts, %+v, model said %q", liPosts(s), reqs, out)
		}
		// The model of the confirming turn knew what was shown and that it
		// waited for the person.
		var seen string
		var conv []byte
		for _, r := range s.env.Model.Requests() {
			if r.LastUserText() == "yes" {
				for _, m := range r.Messages {
					for _, b := range m.Content {
						if b.Type == "tool_result" {
							seen += b.ResultText()
						}
					}
				}
				conv, _ = json.Marshal(r.Messages)
				break
			}
		}
		if !strings.Contains(seen, "has shown the person") || !strings.Contains(seen, "Shown words") {
			t.Fatalf("the model's view of the draft: %q in %s", seen, conv)
		}
	})

	step("a question in the same reply never arrives", func(t *testing.T) {
		out, _ := seedTurn(t, s, false, "draft and ask in one reply", id)
		shown(t, out, "Second words")
	})

	step("a yes after another question publishes nothing", func(t *testing.T) {
		if out, _ := seedTurn(t, s, true, "something else", id); out != question {
			t.Fatalf("a plain answer: %q", out)
		}
		// The model calls the post again: a new draft, shown again.
		out, _ := seedTurn(t, s, true, "yes", id)
		if liPosts(s) != 1 {
			t.Fatalf("a yes to another question published: %d posts", liPosts(s))
		}
		shown(t, out, "Second words")
	})
}

// Once the server shows the person a draft, nothing more runs in that
// turn: a file tool the model called in the same reply, after the
// publishing call, writes nothing. (The CLI may run it in the moment
// between the draft's denial and the server's interrupt; the hook then
// denies it while relay.Session.ShowsDraft, see relay's TestDraftEndsTheTurn. This test cannot
// hold the CLI in that moment, so it guards the outcome only.)
func TestNothingRunsAfterAShownDraft(t *testing.T) {
	t.Parallel()
	var note string
	s := startModel(t, func(req scriptedmodel.Request) scriptedmodel.Reply {
		if req.LastUserText() == "post, then write" && len(req.ToolResults()) == 0 {
			return scriptedmodel.Reply{Blocks: []scriptedmodel.ReplyBlock{
				{Name: "mcp__linkedin__linkedin_post", Input: map[string]any{"text": "Words to show"}},
				{Name: "Write", Input: map[string]any{"file_path": note, "content": "written after the draft"}},
			}}
		}
		return scriptedmodel.Script(req)
	})
	note = filepath.Join(s.env.Vault("sebastian"), "after-draft.md")
	out, _ := seedTurn(t, s, true, "post, then write", "")
	if !strings.HasSuffix(out, shownEnd("Words to show")) {
		t.Fatalf("the turn does not end with the draft: %q", out)
	}
	if _, err := os.Stat(note); err == nil {
		t.Fatal("a file tool ran after the draft was shown")
	}
}
