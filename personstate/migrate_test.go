package personstate_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/personstate"
)

func read(tb testing.TB, path string) string {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatalf("%s: %v", path, err)
	}
	return string(b)
}

// The state directory in testdata/state was written by the server of the
// earlier layout (two persons who chatted once each, a device of
// sebastian's, notification settings of petra's, a LinkedIn publish of
// each left unconfirmed). Migrate gives each person their own part, in
// their folder, and nothing of another's; the shared files are gone; a
// second run changes nothing.
func TestMigrateAStateDirOfTheEarlierLayout(t *testing.T) {
	state := t.TempDir()
	if err := os.CopyFS(state, os.DirFS("testdata/state")); err != nil {
		t.Fatal(err)
	}
	n, err := personstate.Migrate(state, zerolog.Nop())
	if err != nil || n != 2+2+1+1+2 {
		t.Fatalf("moved %d, %v; want 2 sessions, 2 usages, 1 device list, 1 settings, 2 records", n, err)
	}
	sessions := map[string]string{"sebastian": "f286512e-703b-41eb-bc07-658d1a8642c0", "petra": "317afedb-b6cf-46f5-8737-71b6db2a561c"}
	for person, id := range sessions {
		t.Run(person, func(t *testing.T) {
			var meta struct{ ID, Person string }
			if err := json.Unmarshal([]byte(read(t, personstate.File(state, person, "sessions", id, "meta.json"))), &meta); err != nil || meta.Person != person {
				t.Fatalf("index entry: %+v %v", meta, err)
			}
			if log := read(t, personstate.File(state, person, "sessions", id, "events.ndjson")); !strings.Contains(log, "apricot-"+person) {
				t.Fatalf("event log without the person's message")
			}
			var days map[string]struct {
				Messages int `json:"messages"`
			}
			if err := json.Unmarshal([]byte(read(t, personstate.File(state, person, personstate.UsageFile))), &days); err != nil || days["2026-11-26"].Messages != 1 {
				t.Fatalf("usage: %+v %v", days, err)
			}
			var unconfirmed struct {
				Unconfirmed []struct{ Person string } `json:"unconfirmed"`
			}
			if err := json.Unmarshal([]byte(read(t, personstate.File(state, person, personstate.UnconfirmedFile))), &unconfirmed); err != nil ||
				len(unconfirmed.Unconfirmed) != 1 || unconfirmed.Unconfirmed[0].Person != person {
				t.Fatalf("unconfirmed publishes: %+v %v", unconfirmed, err)
			}
			st, err := personstate.Inspect(personstate.Dir(state, person))
			if err != nil || st.Sessions != 1 || st.Conversations != 1 || !st.Usage || !st.Unconfirmed {
				t.Fatalf("inspect: %+v %v", st, err)
			}
		})
	}
	var devices []struct{ Person, Name string }
	if err := json.Unmarshal([]byte(read(t, personstate.File(state, "sebastian", personstate.NotifyDir, personstate.DevicesFile))), &devices); err != nil ||
		len(devices) != 1 || devices[0].Name != "Phone" {
		t.Fatalf("sebastian's devices: %+v %v", devices, err)
	}
	if got := read(t, personstate.File(state, "petra", personstate.NotifyDir, personstate.SettingsFile)); !strings.Contains(got, `"done"`) {
		t.Fatalf("petra's settings: %s", got)
	}
	for _, gone := range []string{"sessions", "usage.json", "notify/devices.json", "notify/settings.json", "linkedin-unconfirmed.json",
		"persons/petra/notify/devices.json", "persons/sebastian/notify/settings.json"} {
		if _, err := os.Stat(filepath.Join(state, gone)); err == nil {
			t.Errorf("%s is still there", gone)
		}
	}
	// The server's own stay.
	if _, err := os.Stat(filepath.Join(state, "notify", "vapid.json")); err != nil {
		t.Errorf("the VAPID keys: %v", err)
	}
	if n, err := personstate.Migrate(state, zerolog.Nop()); n != 0 || err != nil {
		t.Fatalf("second run: moved %d, %v", n, err)
	}
}

// A start that stopped half way (one person's file written, the shared
// one still there) finishes the move without overwriting what the
// person's folder has; a shared entry of no valid person's keeps the
// shared file, and its session folder stays.
func TestMigrateFinishesAnInterruptedMove(t *testing.T) {
	state := t.TempDir()
	write := func(rel, content string) {
		t.Helper()
		p := filepath.Join(state, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("usage.json", `{"sebastian": {"2026-01-01": {"messages": 1}}, "petra": {"2026-01-01": {"messages": 2}}}`)
	write("persons/sebastian/usage.json", `{"2026-01-02": {"messages": 7}}`)
	write("linkedin-unconfirmed.json", `{"unconfirmed": [{"person": "../x", "key": "k", "sent": "2026-01-01T00:00:00Z"}]}`)
	write("sessions/abc/meta.json", `{"id": "abc", "person": "../x"}`)
	n, err := personstate.Migrate(state, zerolog.Nop())
	if err != nil || n != 1 {
		t.Fatalf("moved %d, %v; want petra's usage", n, err)
	}
	if got := read(t, personstate.File(state, "sebastian", "usage.json")); !strings.Contains(got, `"messages": 7`) {
		t.Fatalf("sebastian's own file was replaced: %s", got)
	}
	if got := read(t, personstate.File(state, "petra", "usage.json")); !strings.Contains(got, `"messages": 2`) {
		t.Fatalf("petra's: %s", got)
	}
	for _, kept := range []string{"linkedin-unconfirmed.json", "sessions/abc/meta.json"} {
		if _, err := os.Stat(filepath.Join(state, kept)); err != nil {
			t.Errorf("%s: %v", kept, err)
		}
	}
	if _, err := os.Stat(filepath.Join(state, "usage.json")); err == nil {
		t.Error("the shared usage file stayed")
	}
}
