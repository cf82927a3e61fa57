package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/majorhq/major/notify"
	"github.com/majorhq/major/notify/notifytest"
)

// nextPush waits for the push service's next notification of type typ
// (others are skipped) and returns it decrypted.
func nextPush(tb testing.TB, push *notifytest.PushService, typ string) notify.Payload {
	tb.Helper()
	deadline := time.After(60 * time.Second)
	for {
		select {
		case p := <-push.C:
			if n := p.Notification(tb); n.Type == typ {
				return n
			}
		case <-deadline:
			tb.Fatalf("no %s notification arrived", typ)
		}
	}
}

// nextNtfy waits for ntfy's next message that match accepts.
func nextNtfy(tb testing.TB, ntfy *notifytest.Ntfy, match func(notifytest.NtfyMessage) bool) notifytest.NtfyMessage {
	tb.Helper()
	deadline := time.After(60 * time.Second)
	for {
		select {
		case m := <-ntfy.C:
			if match(m) {
				return m
			}
		case <-deadline:
			tb.Fatal("no such ntfy message arrived")
		}
	}
}

// act posts to an action's URL with no credential (person, when set, is
// sent as X-Notes-Person) and returns the status and answer.
func act(tb testing.TB, actionURL, person string) (int, string) {
	tb.Helper()
	req, _ := http.NewRequest("POST", actionURL, nil)
	if person != "" {
		req.Header.Set("X-Notes-Person", person)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	return resp.StatusCode, readAll(tb, resp)
}

// upTo reads the events stream up to the first event of type typ and
// returns what it read.
func (e *eventLines) upTo(typ string) []map[string]any {
	e.tb.Helper()
	var out []map[string]any
	for {
		m := e.next()
		out = append(out, m)
		if m["type"] == typ {
			return out
		}
	}
}

// TestNotificationsThroughTheCLI runs notifications through the real CLI
// and the scripted model, to a push service that decrypts each message
// with the subscription's key and checks the VAPID signature, to ntfy and
// to FCM:
//   - a device URL the server will not POST to is refused at
//     registration; the VAPID key pair is kept 0600 in the state
//     directory and served as the push configuration;
//   - a question while the person's page is attached but hidden: one
//     notification on each device, whose action (and nothing else: not
//     one presented for another person, not one tampered with) answers
//     it, and the turn goes on; its end, which nobody saw, is notified;
//   - the same with a page watching: no notification;
//   - a post drafted from the phone app (a chat-stream, no card): its
//     notification carries the exact words, its Publish posts them once,
//     and Publish or Decline again change nothing (410);
//   - no action token reaches the log (the tokens are credentials);
//   - a device whose push service answers 410 is removed.
func TestNotificationsThroughTheCLI(t *testing.T) {
	t.Parallel()
	push := notifytest.NewPushService(t)
	ntfy := notifytest.NewNtfy(t, "tk_phone")
	fcm := notifytest.NewFCM(t, "major-notes")
	s := startModel(t, publisher(nil), "--notify-after", "300ms", "--push-allow-hosts", "127.0.0.1",
		"--ntfy-content", "full", "--fcm-credentials", fcm.CredentialsFile(t), "--fcm-endpoint", fcm.URL)
	call := func(t *testing.T, method, path string, body any) (int, map[string]any) {
		t.Helper()
		b, _ := json.Marshal(body)
		if body == nil {
			b = nil
		}
		r := s.req(t, method, path, string(b))
		out := readAll(t, r)
		var m map[string]any
		_ = json.Unmarshal([]byte(out), &m)
		return r.StatusCode, m
	}
	step := func(name string, f func(t *testing.T)) {
		if !t.Run(name, f) {
			t.FailNow()
		}
	}
	sub := push.Subscribe(t)

	step("devices", func(t *testing.T) {
		code, cfg := call(t, "GET", "/api/claude/push/config", nil)
		st, err := os.Stat(filepath.Join(s.state, "notify", "vapid.json"))
		if code != 200 || cfg["vapid_public_key"] == "" || err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("push config %d %v; key file %v %v", code, cfg, err, st)
		}
		push.Expect(cfg["vapid_public_key"].(string))
		for _, refused := range []map[string]any{
			{"kind": "ntfy", "url": "http://ntfy.example.com/major"},
			{"kind": "ntfy", "url": "https://127.0.0.2/major"},
			{"kind": "webpush", "subscription": map[string]any{"endpoint": "https://localhost:8443/push", "keys": sub.Keys}},
		} {
			if code, out := call(t, "POST", "/api/claude/devices", refused); code != http.StatusBadRequest {
				t.Fatalf("registered %v: %d %v", refused, code, out)
			}
		}
		for _, d := range []map[string]any{
			{"kind": "webpush", "subscription": sub, "name": "Laptop"},
			{"kind": "ntfy", "url": ntfy.URL + "/sebastian-phone", "token": "tk_phone"},
			{"kind": "fcm", "token": "android-token"},
		} {
			if code, out := call(t, "POST", "/api/claude/devices", d); code != http.StatusCreated {
				t.Fatalf("register %v: %d %v", d["kind"], code, out)
			}
		}
	})

	var id string
	var lastSeq int64
	var actionURLs []string // every action seen, for the log check
	step("a question nobody watches is answered from its notification", func(t *testing.T) {
		id = s.newSessionAs(t, "sebastian")
		// The web page is open on the chat, in a tab in the background.
		ev := s.events(t, id, 0, "question,question_answered,text,done,error&page=tab-1&visible=false")
		defer ev.body.Close()
		s.message(t, id, "[[ask]]")
		q := ev.upTo("question")
		n := nextPush(t, push, "question")
		if n.SessionID != id || n.RequestID != q[len(q)-1]["request_id"] || !strings.Contains(n.Body, "Which color?") || len(n.Actions) != 2 ||
			n.Actions[1].Label != "Blue" || !strings.HasPrefix(n.Actions[1].URL, s.url+"/api/claude/actions/") {
			t.Fatalf("notification %+v", n)
		}
		m := nextNtfy(t, ntfy, func(notifytest.NtfyMessage) bool { return true })
		if len(m.Actions) != 2 || m.Actions[1].URL == "" || m.Authorization != "Bearer tk_phone" || !strings.Contains(m.Message, "Which color?") {
			t.Fatalf("ntfy %+v", m)
		}
		if f := <-fcm.C; f.Token != "android-token" || f.Data["type"] != "question" {
			t.Fatalf("fcm %+v", f)
		}
		blue := n.Actions[1].URL
		actionURLs = append(actionURLs, blue, n.Actions[0].URL)
		if code, _ := act(t, blue, "petra"); code != http.StatusForbidden {
			t.Fatalf("used for another person: %d", code)
		}
		// The token with a character added (the person in the query only routes).
		if code, _ := act(t, strings.Replace(blue, "?person=", "A?person=", 1), ""); code != http.StatusForbidden {
			t.Fatalf("tampered with: %d", code)
		}
		if code, out := act(t, blue, ""); code != 200 || !strings.Contains(out, "Blue") {
			t.Fatalf("action: %d %s", code, out)
		}
		rest := ev.upTo("done")
		text := ""
		for _, e := range rest {
			if e["type"] == "question_answered" && !strings.Contains(jsonOf(e), "Blue") {
				t.Fatalf("answered %v", e)
			}
			if e["type"] == "text" {
				text += e["delta"].(string)
			}
		}
		if !strings.Contains(text, `"Which color?"="Blue"`) {
			t.Fatalf("the model saw %q", text)
		}
		lastSeq = int64(rest[len(rest)-1]["seq"].(float64))
		for _, u := range []string{blue, n.Actions[0].URL} {
			if code, _ := act(t, u, ""); code != http.StatusGone {
				t.Fatalf("an action after the answer: %d", code)
			}
		}
		// Nobody saw the turn end either.
		if done := nextPush(t, push, "done"); done.SessionID != id || !strings.Contains(done.Body, "Which color?") {
			t.Fatalf("turn end %+v", done)
		}
		questions := 0
		for _, p := range push.Pushes() {
			if p.Err != nil {
				t.Fatalf("a push the service refused: %v", p.Err)
			}
			if p.Notification(t).Type == "question" {
				questions++
			}
		}
		if questions != 1 {
			t.Fatalf("%d question notifications, want 1", questions)
		}
	})

	step("a question someone watches is not notified", func(t *testing.T) {
		before := len(push.Pushes())
		ev := s.events(t, id, lastSeq, "question,done&page=tab-2&visible=true")
		defer ev.body.Close()
		s.message(t, id, "[[ask]]")
		q := ev.next()
		if q["type"] != "question" {
			t.Fatalf("%v", q)
		}
		// Five times --notify-after, watched all along.
		time.Sleep(1500 * time.Millisecond)
		ans := `{"request_id":"` + q["request_id"].(string) + `","answers":{"Which color?":"Red"}}`
		if r := s.req(t, "POST", "/api/claude/sessions/"+id+"/answer", ans); r.StatusCode != 200 {
			t.Fatal(r.StatusCode)
		}
		ev.upTo("done")
		if got := push.Pushes()[before:]; len(got) != 0 {
			t.Fatalf("notified while watched: %d pushes", len(got))
		}
	})

	step("a draft from the phone: the exact words, published once", func(t *testing.T) {
		const words = "Notes from the train: three ideas, one post."
		out, phone := seedTurn(t, s, true, `[[tool mcp__linkedin__linkedin_post {"text":"`+words+`"}]]`, "")
		if !strings.HasSuffix(out, shownEnd(words)) {
			t.Fatalf("the phone saw %q", out)
		}
		n := nextPush(t, push, "draft")
		if n.SessionID != phone || !strings.HasSuffix(n.Body, "\n\n"+words) || len(n.Actions) != 2 || n.Actions[0].Label != "Publish" {
			t.Fatalf("notification %+v", n)
		}
		nextNtfy(t, ntfy, func(m notifytest.NtfyMessage) bool { return m.Priority == 4 && strings.HasSuffix(m.Message, words) })
		if liPosts(s) != 0 {
			t.Fatal("posted before Publish")
		}
		actionURLs = append(actionURLs, n.Actions[0].URL, n.Actions[1].URL)
		if code, out := act(t, n.Actions[0].URL, ""); code != 200 {
			t.Fatalf("publish: %d %s", code, out)
		}
		ev := s.events(t, phone, 0, "done,error")
		defer ev.body.Close()
		for deadline := time.Now().Add(60 * time.Second); liPosts(s) == 0; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("nothing was published")
			}
		}
		// The confirmation's turn ends (its done is the second of the
		// chat), having posted once, exactly the words.
		ev.upTo("done")
		ev.upTo("done")
		for _, u := range []string{n.Actions[0].URL, n.Actions[1].URL} {
			if code, _ := act(t, u, ""); code != http.StatusGone {
				t.Fatalf("an action after Publish: %d", code)
			}
		}
		posts := s.li.Posts()
		if len(posts) != 1 || posts[0].Commentary != words || liPosts(s) != 1 {
			t.Fatalf("LinkedIn has %+v (%d requests)", posts, liPosts(s))
		}
	})

	step("no action token is logged", func(t *testing.T) {
		for _, u := range actionURLs {
			if tok := u[strings.LastIndex(u, "/")+1:]; strings.Contains(s.logs.String(), tok[:40]) {
				t.Fatalf("an action token is in the log")
			}
		}
	})

	step("a subscription its push service says is gone is removed", func(t *testing.T) {
		push.Answer(sub.Endpoint, http.StatusGone)
		if code, out := call(t, "POST", "/api/claude/notifications/test", nil); code != 200 || out["sent"].(float64) != 2 {
			t.Fatalf("test notification: %d %v", code, out)
		}
		_, list := call(t, "GET", "/api/claude/devices", nil)
		if b, _ := json.Marshal(list); strings.Contains(string(b), "webpush") || strings.Count(string(b), `"id"`) != 2 {
			t.Fatalf("devices %s", b)
		}
	})
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
