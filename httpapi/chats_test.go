package httpapi_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/majorhq/major/httpapi/httpapitest"
)

// A chat's title, pin and deletion take the person's own chat only and
// refuse what they cannot take with a clear status.
func TestChatListControlsValidateTheirInput(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{reply: scriptedReply})
	id := h.NewSession(t)
	base := "/api/claude/sessions/" + id
	checkStatuses(t, h, []statusCase{
		{"title", "POST", base + "/title", "sebastian", "", `{"title":"Trip to Lisbon"}`, 200},
		{"title as a form", "POST", base + "/title", "sebastian", "application/x-www-form-urlencoded", "title=Trip", 200},
		{"title empty", "POST", base + "/title", "sebastian", "", `{"title":""}`, 400},
		{"title spaces only", "POST", base + "/title", "sebastian", "", `{"title":"  \n "}`, 400},
		{"no title", "POST", base + "/title", "sebastian", "", `{}`, 400},
		{"title too long", "POST", base + "/title", "sebastian", "", `{"title":"` + strings.Repeat("x", 201) + `"}`, 400},
		{"title not a string", "POST", base + "/title", "sebastian", "", `{"title":7}`, 400},
		{"title: unknown session", "POST", "/api/claude/sessions/nope/title", "sebastian", "", `{"title":"x"}`, 404},
		{"title: another person's session", "POST", base + "/title", "petra", "", `{"title":"x"}`, 404},
		{"pin", "POST", base + "/pin", "sebastian", "", `{"pinned":true}`, 200},
		{"unpin as a form", "POST", base + "/pin", "sebastian", "application/x-www-form-urlencoded", "pinned=false", 200},
		{"pin without pinned", "POST", base + "/pin", "sebastian", "", `{}`, 400},
		{"pin not a bool", "POST", base + "/pin", "sebastian", "", `{"pinned":"yes"}`, 400},
		{"pin: another person's session", "POST", base + "/pin", "petra", "", `{"pinned":true}`, 404},
		{"search too long", "GET", "/api/claude/sessions?q=" + strings.Repeat("x", 501), "sebastian", "", "", 400},
		{"delete: unknown session", "DELETE", "/api/claude/sessions/nope", "sebastian", "", "", 404},
		{"delete: another person's session", "DELETE", base, "petra", "", "", 404},
	})
	if _, info := h.Call(t, "GET", base, "sebastian", nil); info["title"] != "Trip" || info["pinned"] == true {
		t.Fatalf("the session after the table: %v", info)
	}
}

// A person renames, pins, finds and deletes their chats: the list and the
// session show the title and the pin, search finds the chat by a word of
// its messages and never another person's, and a deleted chat is gone.
func TestRenamePinSearchAndDeleteChats(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{reply: scriptedReply})
	say := func(person, session, text string) string {
		t.Helper()
		_, evs := h.ChatStream(t, person, "", httpapitest.JSONBody(map[string]any{"message": "[[say " + text + "]]", "session_id": session}))
		return httpapitest.StreamText(evs)
	}
	soup, lisbon := h.NewSession(t), h.NewSession(t)
	say("sebastian", soup, "leek soup needs butter")
	say("sebastian", lisbon, "pack a coat for Lisbon")
	code, created := h.Call(t, "POST", "/api/claude/sessions", "petra", nil)
	if code != http.StatusCreated {
		t.Fatalf("petra's session: %d", code)
	}
	petras := created["id"].(string)
	say("petra", petras, "leek soup for petra")

	if code, info := h.Call(t, "POST", "/api/claude/sessions/"+soup+"/title", "sebastian", map[string]any{"title": "Soup"}); code != http.StatusOK || info["title"] != "Soup" {
		t.Fatalf("rename: %d %v", code, info)
	}
	if code, info := h.Call(t, "POST", "/api/claude/sessions/"+soup+"/pin", "sebastian", map[string]any{"pinned": true}); code != http.StatusOK || info["pinned"] != true {
		t.Fatalf("pin: %d %v", code, info)
	}
	if _, info := h.Call(t, "GET", "/api/claude/sessions/"+soup, "sebastian", nil); info["title"] != "Soup" || info["pinned"] != true {
		t.Fatalf("the session: %v", info)
	}
	list := func(query string) []map[string]any {
		t.Helper()
		path := "/api/claude/sessions"
		if query != "" {
			path += "?q=" + url.QueryEscape(query)
		}
		code, body := h.Call(t, "GET", path, "sebastian", nil)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d", path, code)
		}
		var out []map[string]any
		for _, s := range body["sessions"].([]any) {
			out = append(out, s.(map[string]any))
		}
		return out
	}
	// lisbon is the more recently active, soup is pinned.
	if got := list(""); len(got) != 2 || got[0]["id"] != soup || got[0]["title"] != "Soup" || got[1]["id"] != lisbon {
		t.Fatalf("list: %v", got)
	}
	tests := []struct {
		query string
		want  []string
	}{
		{"soup", []string{soup}},
		{"LEEK butter", []string{soup}},
		{"lisbon", []string{lisbon}},
		{"a", []string{lisbon, soup}},
		{"petra", nil},
		{"", nil},
	}
	for _, tc := range tests {
		t.Run("search "+tc.query, func(t *testing.T) {
			code, body := h.Call(t, "GET", "/api/claude/sessions?q="+url.QueryEscape(tc.query), "sebastian", nil)
			if code != http.StatusOK {
				t.Fatalf("%d", code)
			}
			var ids []string
			for _, s := range body["sessions"].([]any) {
				ids = append(ids, fmt.Sprint(s.(map[string]any)["id"]))
			}
			if strings.Join(ids, " ") != strings.Join(tc.want, " ") {
				t.Fatalf("found %v, want %v", ids, tc.want)
			}
		})
	}

	if code, _ := h.Call(t, "DELETE", "/api/claude/sessions/"+soup, "sebastian", nil); code != http.StatusOK {
		t.Fatalf("delete: %d", code)
	}
	if code, _ := h.Call(t, "GET", "/api/claude/sessions/"+soup, "sebastian", nil); code != http.StatusNotFound {
		t.Fatalf("a deleted chat: %d", code)
	}
	if got := list(""); len(got) != 1 || got[0]["id"] != lisbon {
		t.Fatalf("list after delete: %v", got)
	}
	if code, _ := h.Call(t, "GET", "/api/claude/sessions/"+petras, "petra", nil); code != http.StatusOK {
		t.Fatalf("petra's chat after sebastian's delete: %d", code)
	}
}
