package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/majorhq/major/linkedin/linkedintest"
	"github.com/majorhq/major/mcpserver"
)

// eventLines reads a session's events stream line by line, skipping pings.
type eventLines struct {
	tb   testing.TB
	sc   *bufio.Scanner
	body interface{ Close() error }
}

func (s *server) events(tb testing.TB, id string, after int64, types string) *eventLines {
	tb.Helper()
	r := s.req(tb, "GET", fmt.Sprintf("/api/claude/sessions/%s/events?after=%d&types=%s", id, after, types), "")
	sc := bufio.NewScanner(r.Body)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	return &eventLines{tb: tb, sc: sc, body: r.Body}
}

func (e *eventLines) next() map[string]any {
	e.tb.Helper()
	for e.sc.Scan() {
		var m map[string]any
		_ = json.Unmarshal(e.sc.Bytes(), &m)
		if m["type"] != "ping" {
			return m
		}
	}
	e.tb.Fatalf("events stream ended: %v", e.sc.Err())
	return nil
}

// message posts a message to the session and returns the seq it follows.
func (s *server) message(tb testing.TB, id, text string) int64 {
	tb.Helper()
	b, _ := json.Marshal(map[string]string{"message": text})
	r := s.req(tb, "POST", "/api/claude/sessions/"+id+"/messages", string(b))
	var posted struct{ After int64 }
	if body := readAll(tb, r); r.StatusCode != http.StatusAccepted || json.Unmarshal([]byte(body), &posted) != nil {
		tb.Fatalf("message %q: %d %s", text, r.StatusCode, body)
	}
	return posted.After
}

// TestRememberNeverCoversPublishing: "allow for this session" on one
// post, on a card or on a draft, never lets a later, different post
// through without the person seeing it; the card says that it cannot be
// remembered.
func TestRememberNeverCoversPublishing(t *testing.T) {
	t.Parallel()
	s := start(t)
	id := s.newSessionAs(t, "sebastian")
	answer := func(t *testing.T, requestID, behavior string) {
		t.Helper()
		ans := `{"request_id":"` + requestID + `","behavior":"` + behavior + `","remember":true}`
		if r := s.req(t, "POST", "/api/claude/sessions/"+id+"/permission", ans); r.StatusCode != http.StatusOK {
			t.Fatalf("answer: %d %s", r.StatusCode, readAll(t, r))
		}
	}

	step := func(name string, f func(t *testing.T)) {
		if !t.Run(name, f) {
			t.FailNow()
		}
	}

	step("on a card", func(t *testing.T) {
		after := s.message(t, id, `[[tool mcp__linkedin__linkedin_post {"text":"First, approved"}]]`)
		ev := s.events(t, id, after, "permission,text,done,error")
		defer ev.body.Close()
		perm := ev.next()
		if perm["type"] != "permission" {
			t.Fatalf("a post without a card: %v", perm)
		}
		if perm["can_remember"] != false {
			t.Errorf("the card does not say that a post cannot be remembered: %v", perm)
		}
		answer(t, perm["request_id"].(string), "allow")
		for m := ev.next(); m["type"] != "done"; m = ev.next() {
		}
		if liPosts(s) != 1 {
			t.Fatalf("%d posts after one allow", liPosts(s))
		}
		s.message(t, id, `[[tool mcp__linkedin__linkedin_post {"text":"Second, never seen"}]]`)
		m := ev.next()
		if m["type"] != "permission" {
			t.Fatalf("a second post after allow-for-this-session: %v, %d posts", m, liPosts(s))
		}
		if liPosts(s) != 1 {
			t.Fatal("the second post went out without asking")
		}
		answer(t, m["request_id"].(string), "deny")
		for m := ev.next(); m["type"] != "done"; m = ev.next() {
		}
	})
	// Detached: the session has no client that can answer cards now.
	step("on a draft", func(t *testing.T) {
		drafts := &draftLog{s: s, id: id}
		seedTurn(t, s, true, `[[tool mcp__linkedin__linkedin_post {"text":"Third, a draft"}]]`, id)
		d := drafts.next(t, 1, nil)[0]
		wantDraft(t, d, "draft", nil)
		answer(t, d["request_id"].(string), "allow")
		before := liPosts(s)
		out, _ := seedTurn(t, s, true, `[[tool mcp__linkedin__linkedin_post {"text":"Fourth, never seen"}]]`, id)
		if liPosts(s) != before {
			t.Fatalf("a different post ran on a remembered draft answer: %q", out)
		}
	})
}

// TestUnknownOutcomeIsNotRepeated: LinkedIn applies a post, answers 502
// and lists it only much later (far later than the client's lookup
// waits). The post is on LinkedIn once, never twice; the model and the
// person are told that the outcome is unknown and where to check; an
// identical post right after is refused at /mcp and asked in the chat,
// even of a person who publishes without asking, until the person
// approves it again; a different text goes out as usual.
func TestUnknownOutcomeIsNotRepeated(t *testing.T) {
	t.Parallel()
	s := startModel(t, publisher(nil), "--linkedin-auto-publish", "sebastian")
	const post = `[[tool mcp__linkedin__linkedin_post {"text":"Maybe published"}]]`
	const where = "the LinkedIn activity page"
	maybe := func() int {
		n := 0
		for _, p := range s.li.Posts() {
			if p.Commentary == "Maybe published" {
				n++
			}
		}
		return n
	}
	step := func(name string, f func(t *testing.T)) {
		if !t.Run(name, f) {
			t.FailNow()
		}
	}
	var id string

	step("sent once, outcome unknown", func(t *testing.T) {
		s.li.SetListingLag(30 * time.Second)
		s.li.Enqueue(linkedintest.Response{Status: http.StatusBadGateway, Apply: true, Method: http.MethodPost})
		var out string
		var statuses []string
		out, statuses, id = seedTurnStatus(t, s, true, post, "")
		if maybe() != 1 || liPosts(s) != 1 {
			t.Fatalf("on LinkedIn %d times, sent %d times", maybe(), liPosts(s))
		}
		if !strings.Contains(out, "outcome is unknown") || !strings.Contains(out, where) || !strings.Contains(out, "not sent again") {
			t.Fatalf("the model saw %q", out)
		}
		told := false
		for _, st := range statuses {
			told = told || strings.Contains(st, "LinkedIn did not confirm whether your post was published. Check "+where)
		}
		if !told {
			t.Fatalf("the person was not told where to check: %q", statuses)
		}
	})

	step("an identical post is refused at /mcp", func(t *testing.T) {
		text, isErr := mcpCall(t, s, "sebastian", mcpserver.ToolPost, map[string]any{"text": "Maybe published"})
		if !isErr || !strings.Contains(text, "refused: an identical post") || liPosts(s) != 1 {
			t.Fatalf("isError=%v %q, sent %d times", isErr, text, liPosts(s))
		}
	})

	step("an identical post in the chat is asked", func(t *testing.T) {
		out, _ := seedTurn(t, s, true, post, id)
		if liPosts(s) != 1 || !strings.Contains(out, "Careful: an identical post was sent at") || !strings.HasSuffix(out, replyYes) {
			t.Fatalf("sent %d times; the client saw %q", liPosts(s), out)
		}
	})

	step("a different text goes out", func(t *testing.T) {
		out, _ := seedTurn(t, s, true, `[[tool mcp__linkedin__linkedin_post {"text":"Something else"}]]`, id)
		if liPosts(s) != 2 || !strings.Contains(out, "Posted to LinkedIn") {
			t.Fatalf("sent %d times; the model saw %q", liPosts(s), out)
		}
	})

	step("approved again, the identical post goes out once", func(t *testing.T) {
		seedTurn(t, s, true, post, id)
		out, _ := seedTurn(t, s, false, "yes", id)
		if liPosts(s) != 3 || maybe() != 2 || !strings.Contains(out, "Posted to LinkedIn") {
			t.Fatalf("sent %d times, on LinkedIn %d times; the model saw %q", liPosts(s), maybe(), out)
		}
	})
}
