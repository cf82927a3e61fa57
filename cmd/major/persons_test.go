package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/majorhq/major/clihome"
)

// getJSON is a GET as person, its JSON answer decoded into out.
func (s *server) getJSON(tb testing.TB, person, path string, out any) {
	tb.Helper()
	resp := s.reqWith(tb, testToken, person, "GET", path, "")
	body := readAll(tb, resp)
	if resp.StatusCode != 200 {
		tb.Fatalf("GET %s as %s: %d %s", path, person, resp.StatusCode, body)
	}
	if err := json.Unmarshal([]byte(body), out); err != nil {
		tb.Fatalf("GET %s: %v: %s", path, err, body)
	}
}

// A state directory written by the server of the earlier layout
// (personstate/testdata/state: two persons who chatted once each, a
// device of sebastian's, notification settings of petra's) serves as
// before once the server has moved it into the persons' folders: the
// chats with their histories, what they cost, the device and the
// settings, and the next message continues the conversation.
func TestServesAStateDirOfTheEarlierLayout(t *testing.T) {
	t.Parallel()
	// The chats of the fixture are from its day: none expires.
	s := start(t, "--session-ttl", "0")
	s.stop(t)
	if err := os.RemoveAll(s.state); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(s.state, os.DirFS("../../personstate/testdata/state")); err != nil {
		t.Fatal(err)
	}
	// The fixture's CLI ran in a vault at another path; its transcripts
	// are where the CLI looks for this test's vault.
	for _, p := range []string{"sebastian", "petra"} {
		projects := filepath.Join(clihome.ConfigDir(clihome.Home(s.state, p)), "projects")
		if err := os.Rename(filepath.Join(projects, clihome.ProjectName("/srv/major-fixture/vault/"+p)), filepath.Join(projects, clihome.ProjectName(s.env.Vault(p)))); err != nil {
			t.Fatal(err)
		}
	}
	// Its usage is of its day: moved to today, so the last days show it.
	ledger := filepath.Join(s.state, "usage.json")
	b, err := os.ReadFile(ledger)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, ledger, strings.ReplaceAll(string(b), "2026-11-26", time.Now().UTC().Format(time.DateOnly)))
	s = restart(t, s)

	for _, p := range []string{"sebastian", "petra"} {
		var list struct {
			Sessions []struct{ ID, Title string } `json:"sessions"`
		}
		s.getJSON(t, p, "/api/claude/sessions", &list)
		if len(list.Sessions) != 1 || list.Sessions[0].Title != "Remember the word apricot-"+p {
			t.Fatalf("%s's chats: %+v", p, list.Sessions)
		}
		var usage struct {
			Total struct {
				Messages int `json:"messages"`
			} `json:"total"`
		}
		s.getJSON(t, p, "/api/claude/usage?days=1", &usage)
		if usage.Total.Messages != 1 {
			t.Fatalf("%s's usage: %+v", p, usage)
		}
		if got := s.chatIn(t, p, list.Sessions[0].ID, "[[recall]]"); !strings.Contains(got, "apricot-"+p) {
			t.Fatalf("%s's chat did not continue its conversation: %q", p, got)
		}
	}
	var devices struct {
		Devices []struct{ Name string } `json:"devices"`
	}
	s.getJSON(t, "sebastian", "/api/claude/devices", &devices)
	if len(devices.Devices) != 1 || devices.Devices[0].Name != "Phone" {
		t.Fatalf("sebastian's devices: %+v", devices)
	}
	s.getJSON(t, "petra", "/api/claude/devices", &devices)
	if len(devices.Devices) != 0 {
		t.Fatalf("petra's devices: %+v", devices)
	}
	var settings struct{ Events []string }
	s.getJSON(t, "petra", "/api/claude/notifications", &settings)
	if strings.Join(settings.Events, ",") != "question,done" {
		t.Fatalf("petra's settings: %+v", settings)
	}
	for _, gone := range []string{"sessions", "usage.json", "notify/devices.json", "linkedin-unconfirmed.json"} {
		if _, err := os.Stat(filepath.Join(s.state, gone)); err == nil {
			t.Errorf("%s is still there", gone)
		}
	}
}
