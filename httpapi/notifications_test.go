package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/majorhq/major/httpapi/httpapitest"
	"github.com/majorhq/major/notify"
	"github.com/majorhq/major/notify/notifytest"
	"github.com/majorhq/major/relay"
	"github.com/majorhq/major/supervisor"
)

func notifyHarness(tb testing.TB) (*harness, *notifytest.PushService) {
	tb.Helper()
	push := notifytest.NewPushService(tb)
	h := newHarness(tb, harnessOpts{
		notify: &notify.Config{StateDir: tb.TempDir(), NotifyAfter: 20 * time.Millisecond, AllowHosts: []string{"127.0.0.1"}},
		policy: &relay.AskPolicy{Ask: func(tool string, _ json.RawMessage) bool { return tool == "Write" }},
	})
	push.Expect(h.notify.VAPIDPublicKey())
	return h, push
}

// TestDevicesAndSettingsEndpoints: the push configuration gives the
// server's VAPID key; a device is registered (201), listed without its
// secrets and removed, only by its person; a device URL the server will
// not POST to is refused at registration; the settings are read and
// written, and refused when they do not parse.
func TestDevicesAndSettingsEndpoints(t *testing.T) {
	t.Parallel()
	h, push := notifyHarness(t)
	code, cfg := h.Call(t, "GET", "/api/claude/push/config", "sebastian", nil)
	if code != 200 || cfg["vapid_public_key"] != h.notify.VAPIDPublicKey() {
		t.Fatalf("push config: %d %v", code, cfg)
	}
	sub := push.Subscribe(t)
	code, dev := h.Call(t, "POST", "/api/claude/devices", "sebastian", map[string]any{"kind": "webpush", "subscription": sub, "name": "Laptop"})
	if code != http.StatusCreated || dev["id"] == "" || dev["kind"] != "webpush" {
		t.Fatalf("register: %d %v", code, dev)
	}
	for _, tc := range []struct {
		name string
		body map[string]any
	}{
		{"plain http", map[string]any{"kind": "ntfy", "url": "http://ntfy.example.com/topic"}},
		{"a host of this machine", map[string]any{"kind": "ntfy", "url": "https://localhost/topic"}},
		{"a private address", map[string]any{"kind": "ntfy", "url": "https://192.168.1.10/topic"}},
		{"no kind", map[string]any{"url": "https://ntfy.sh/topic"}},
		{"fcm, not configured", map[string]any{"kind": "fcm", "token": "abc"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if code, out := h.Call(t, "POST", "/api/claude/devices", "sebastian", tc.body); code != http.StatusBadRequest {
				t.Fatalf("register: %d %v", code, out)
			}
		})
	}
	code, list := h.Call(t, "GET", "/api/claude/devices", "sebastian", nil)
	b, _ := json.Marshal(list)
	if code != 200 || strings.Count(string(b), `"id"`) != 1 || strings.Contains(string(b), sub.Keys.Auth) || strings.Contains(string(b), sub.Endpoint) {
		t.Fatalf("list: %d %s", code, b)
	}
	if code, _ := h.Call(t, "DELETE", "/api/claude/devices/"+dev["id"].(string), "petra", nil); code != http.StatusNotFound {
		t.Fatalf("another person removed it: %d", code)
	}
	if code, _ := h.Call(t, "DELETE", "/api/claude/devices/"+dev["id"].(string), "sebastian", nil); code != 200 {
		t.Fatalf("remove: %d", code)
	}
	if code, _ := h.Call(t, "DELETE", "/api/claude/devices/"+dev["id"].(string), "sebastian", nil); code != http.StatusNotFound {
		t.Fatalf("remove again: %d", code)
	}

	code, set := h.Call(t, "GET", "/api/claude/notifications", "sebastian", nil)
	if code != 200 || len(set["events"].([]any)) != len(notify.Types) || set["quiet_hours"] != nil {
		t.Fatalf("settings: %d %v", code, set)
	}
	want := map[string]any{"events": []any{"question", "draft"}, "quiet_hours": map[string]any{"from": "22:00", "to": "07:00", "tz": "Europe/Berlin"}}
	if code, set = h.Call(t, "PUT", "/api/claude/notifications", "sebastian", want); code != 200 || httpapitest.JSONBody(set) != httpapitest.JSONBody(want) {
		t.Fatalf("put: %d %v", code, set)
	}
	if code, _ := h.Call(t, "PUT", "/api/claude/notifications", "sebastian", map[string]any{"quiet_hours": map[string]any{"from": "22:00", "to": "7"}}); code != http.StatusBadRequest {
		t.Fatalf("bad settings: %d", code)
	}
	if _, set = h.Call(t, "GET", "/api/claude/notifications", "sebastian", nil); httpapitest.JSONBody(set) != httpapitest.JSONBody(want) {
		t.Fatalf("settings after a refused change: %v", set)
	}
	if _, set = h.Call(t, "GET", "/api/claude/notifications", "petra", nil); set["quiet_hours"] != nil {
		t.Fatalf("one person's settings are another's: %v", set)
	}
}

// postAction posts to an action's URL (relative: the harness has no
// public URL), as person when not empty, and returns the status.
func postAction(tb testing.TB, h *harness, url, person string) (int, string) {
	tb.Helper()
	req, _ := http.NewRequest("POST", h.url+url, nil)
	if person != "" {
		req.Header.Set("X-Notes-Person", person)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestNotificationActions: with the person's page attached but hidden, a
// question notifies; its action needs no credential but its token and
// answers the question; replayed, tampered with, presented for another
// person, or used after the card answered, an action gets 410 or 403 and
// changes nothing. A permission's Deny denies.
func TestNotificationActions(t *testing.T) {
	t.Parallel()
	h, push := notifyHarness(t)
	sub := push.Subscribe(t)
	if code, out := h.Call(t, "POST", "/api/claude/devices", "sebastian", map[string]any{"kind": "webpush", "subscription": sub}); code != 201 {
		t.Fatalf("register: %d %v", code, out)
	}
	id := h.NewSession(t)
	events, detach := h.Attach(t, id, "page=tab-1&visible=false")
	defer detach()
	if code, _ := h.Call(t, "POST", "/api/claude/sessions/"+id+"/messages", "sebastian", map[string]any{"message": "work"}); code != 202 {
		t.Fatal(code)
	}
	cli := h.turn(t, "work")
	use := func(tool string, input any) <-chan supervisor.PermissionResult {
		out := make(chan supervisor.PermissionResult, 1)
		go func() {
			r, _ := cli.UseTool(context.Background(), tool, input)
			out <- r
		}()
		return out
	}
	question := map[string]any{"questions": []any{map[string]any{"question": "Which color?", "header": "Color", "multiSelect": false,
		"options": []any{map[string]any{"label": "Red", "description": ""}, map[string]any{"label": "Blue", "description": ""}}}}}
	ask := func(t *testing.T) (<-chan supervisor.PermissionResult, notify.Payload) {
		t.Helper()
		res := use("AskUserQuestion", question)
		p := (<-push.C).Notification(t)
		if p.Type != "question" || p.SessionID != id || len(p.Actions) != 2 {
			t.Fatalf("notification %+v", p)
		}
		return res, p
	}

	t.Run("answered from the notification", func(t *testing.T) {
		res, p := ask(t)
		blue := p.Actions[1].URL
		if code, _ := postAction(t, h, blue, "petra"); code != http.StatusForbidden {
			t.Fatalf("presented for another person: %d", code)
		}
		body, sig, _ := strings.Cut(blue[strings.LastIndex(blue, "/")+1:], ".")
		if code, _ := postAction(t, h, "/api/claude/actions/"+body+"x."+sig, ""); code != http.StatusForbidden {
			t.Fatalf("tampered: %d", code)
		}
		select {
		case r := <-res:
			t.Fatalf("answered by a refused action: %+v", r)
		default:
		}
		if code, out := postAction(t, h, blue, ""); code != 200 || !strings.Contains(out, "Answered: Blue") {
			t.Fatalf("action: %d %s", code, out)
		}
		if r := <-res; !r.Allow || !strings.Contains(string(r.UpdatedInput), `"Which color?":"Blue"`) {
			t.Fatalf("the CLI got %+v", r)
		}
		for _, url := range []string{blue, p.Actions[0].URL} {
			if code, _ := postAction(t, h, url, ""); code != http.StatusGone {
				t.Fatalf("replayed: %d", code)
			}
		}
		ev := httpapitest.Until(t, events, "question_answered")
		if last := ev[len(ev)-1]; !strings.Contains(string(last["answers"]), "Blue") {
			t.Fatalf("the page saw %v", last)
		}
	})

	t.Run("after the card answered", func(t *testing.T) {
		res, p := ask(t)
		code, _ := h.Call(t, "POST", "/api/claude/sessions/"+id+"/answer", "sebastian",
			map[string]any{"request_id": p.RequestID, "answers": map[string]string{"Which color?": "Red"}})
		if code != 200 {
			t.Fatal(code)
		}
		if code, _ := postAction(t, h, p.Actions[1].URL, ""); code != http.StatusGone {
			t.Fatalf("action after the card: %d", code)
		}
		if r := <-res; !strings.Contains(string(r.UpdatedInput), `"Which color?":"Red"`) {
			t.Fatalf("the CLI got %+v", r)
		}
	})

	t.Run("a permission denied", func(t *testing.T) {
		res := use("Write", map[string]any{"file_path": "notes/a.md", "content": "x"})
		p := (<-push.C).Notification(t)
		if p.Type != "permission" || len(p.Actions) != 2 || p.Actions[1].Label != "Deny" || !strings.Contains(p.Body, "Allow Write?") {
			t.Fatalf("notification %+v", p)
		}
		if code, _ := postAction(t, h, p.Actions[1].URL, "sebastian"); code != 200 {
			t.Fatal(code)
		}
		if r := <-res; r.Allow {
			t.Fatalf("the CLI got %+v", r)
		}
	})
}
