package notify_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/notify"
	"github.com/majorhq/major/personstate"
	"github.com/majorhq/major/relay"
)

// TestDeviceRegistration: a device URL is one the server will POST to:
// only https, no credentials or fragment in it, no name or address of
// this machine or a private network unless the owner named its host;
// keys and tokens must be what their service uses. The list shows no
// secret.
func TestDeviceRegistration(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	sub := func(endpoint string) *notify.Subscription {
		s := w.push.Subscribe(t)
		s.Endpoint = endpoint
		return &s
	}
	for _, tc := range []struct {
		name string
		dev  notify.NewDevice
		ok   bool
	}{
		{"web push on https", notify.NewDevice{Kind: "webpush", Subscription: sub("https://fcm.googleapis.com/fcm/send/abc")}, true},
		{"web push on a host the owner named", notify.NewDevice{Kind: "webpush", Subscription: sub(w.push.URL + "/push/x")}, true},
		{"web push on plain http", notify.NewDevice{Kind: "webpush", Subscription: sub("http://push.example.com/x")}, false},
		{"web push on localhost", notify.NewDevice{Kind: "webpush", Subscription: sub("https://localhost/x")}, false},
		{"web push on a private address", notify.NewDevice{Kind: "webpush", Subscription: sub("https://10.1.2.3/x")}, false},
		{"web push on a link-local address", notify.NewDevice{Kind: "webpush", Subscription: sub("https://[fe80::1]/x")}, false},
		{"web push on the metadata address", notify.NewDevice{Kind: "webpush", Subscription: sub("https://169.254.169.254/latest")}, false},
		{"a URL with a password", notify.NewDevice{Kind: "webpush", Subscription: sub("https://user:pw@push.example.com/x")}, false},
		{"a URL with a fragment", notify.NewDevice{Kind: "webpush", Subscription: sub("https://push.example.com/x#y")}, false},
		{"not a URL", notify.NewDevice{Kind: "webpush", Subscription: sub("push.example.com/x")}, false},
		{"a file URL", notify.NewDevice{Kind: "webpush", Subscription: sub("file:///etc/passwd")}, false},
		{"no subscription", notify.NewDevice{Kind: "webpush"}, false},
		{"a p256dh that is no point", notify.NewDevice{Kind: "webpush", Subscription: func() *notify.Subscription {
			s := sub("https://push.example.com/x")
			s.Keys.P256dh = "BAAA"
			return s
		}()}, false},
		{"an auth that is not 16 bytes", notify.NewDevice{Kind: "webpush", Subscription: func() *notify.Subscription {
			s := sub("https://push.example.com/x")
			s.Keys.Auth = "c2hvcnQ"
			return s
		}()}, false},
		{"ntfy.sh", notify.NewDevice{Kind: "ntfy", URL: "https://ntfy.sh/major-sebastian-7f3a", Token: "tk_abc"}, true},
		{"ntfy on loopback, named", notify.NewDevice{Kind: "ntfy", URL: w.ntfy.URL + "/mine"}, true},
		{"ntfy without a topic", notify.NewDevice{Kind: "ntfy", URL: "https://ntfy.sh/"}, false},
		{"ntfy with a query", notify.NewDevice{Kind: "ntfy", URL: "https://ntfy.sh/topic?x=1"}, false},
		{"ntfy on plain http elsewhere", notify.NewDevice{Kind: "ntfy", URL: "http://ntfy.sh/topic"}, false},
		{"ntfy with a token with spaces", notify.NewDevice{Kind: "ntfy", URL: "https://ntfy.sh/topic", Token: "a b"}, false},
		{"fcm", notify.NewDevice{Kind: "fcm", Token: "fcm-token-1"}, true},
		{"fcm without its token", notify.NewDevice{Kind: "fcm"}, false},
		{"an unknown kind", notify.NewDevice{Kind: "pager", URL: "https://pager.example.com"}, false},
		{"a name of two lines", notify.NewDevice{Kind: "fcm", Token: "fcm-token-2", Name: "a\nb"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := w.s.AddDevice("petra", tc.dev)
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, notify.ErrBadDevice)) {
				t.Fatalf("AddDevice: %v, want ok %v", err, tc.ok)
			}
		})
	}
	list, _ := json.Marshal(w.s.Devices("petra"))
	for _, secret := range []string{"tk_abc", "fcm-token-1", "major-sebastian-7f3a", "p256dh", "auth", "/fcm/send/abc"} {
		if strings.Contains(string(list), secret) {
			t.Errorf("the device list shows %q: %s", secret, list)
		}
	}
	if n := len(w.s.Devices("petra")); n != 5 {
		t.Errorf("%d devices kept", n)
	}
	if len(w.s.Devices("sebastian")) != 1 {
		t.Error("one person's devices show in another's list")
	}
}

// TestFCMOnlyWhenConfigured: a server without FCM credentials refuses an
// fcm device instead of keeping one it can never reach.
func TestFCMOnlyWhenConfigured(t *testing.T) {
	t.Parallel()
	w := newWorld(t, func(c *notify.Config) { c.FCM = nil })
	if _, err := w.s.AddDevice("sebastian", notify.NewDevice{Kind: "fcm", Token: "x"}); !errors.Is(err, notify.ErrBadDevice) {
		t.Fatalf("AddDevice: %v", err)
	}
}

// TestGoneDevicesAreRemoved: a Web Push endpoint its service answers 404
// or 410 for, and an FCM token FCM says is unregistered, are removed; a
// device that failed otherwise is kept.
func TestGoneDevicesAreRemoved(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status int
		kept   bool
	}{
		{"410", http.StatusGone, false},
		{"404", http.StatusNotFound, false},
		{"500", http.StatusInternalServerError, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, nil)
			w.push.Answer(w.sub.Endpoint, tc.status)
			res := w.s.Test("sebastian")
			if len(res) != 1 || res[0].Error == "" {
				t.Fatalf("test notification: %+v", res)
			}
			if kept := len(w.s.Devices("sebastian")) == 1; kept != tc.kept {
				t.Fatalf("device kept: %v, want %v", kept, tc.kept)
			}
		})
	}
	t.Run("fcm unregistered", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t, nil)
		info, err := w.s.AddDevice("petra", notify.NewDevice{Kind: "fcm", Token: "old-token"})
		if err != nil {
			t.Fatal(err)
		}
		w.fcm.Unregister("old-token")
		w.s.Test("petra")
		for _, d := range w.s.Devices("petra") {
			if d.ID == info.ID {
				t.Fatal("an unregistered FCM token was kept")
			}
		}
	})
}

// TestNtfy: ntfy gets JSON publishing with the device's token; by default
// only a summary (no text of the chat), with the action buttons as http
// POST actions; with full content the same text as Web Push.
func TestNtfy(t *testing.T) {
	t.Parallel()
	for _, content := range []string{"", notify.ContentFull} {
		t.Run("content "+content, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, func(c *notify.Config) { c.NtfyContent = content })
			if _, err := w.s.AddDevice("petra", notify.NewDevice{Kind: "ntfy", URL: w.ntfy.URL + "/petra-phone", Token: "tk_secret"}); err != nil {
				t.Fatal(err)
			}
			w.s.Waiting(relay.Waiting{Person: "petra", SessionID: "c", Title: "Launch post", RequestID: "d", Kind: "draft",
				Tool: "mcp__linkedin__linkedin_post", What: "the LinkedIn post", Text: "We launched today."})
			w.clock.Advance(notifyAfter)
			w.s.Flush()
			m := <-w.ntfy.C
			if m.Topic != "petra-phone" || m.Authorization != "Bearer tk_secret" || m.Priority != 4 || m.Click != "https://major.example/app/#c" {
				t.Fatalf("message %+v", m)
			}
			if len(m.Actions) != 2 || m.Actions[0].Label != "Publish" || m.Actions[0].Action != "http" || m.Actions[0].Method != "POST" ||
				!strings.HasPrefix(m.Actions[0].URL, "https://major.example/api/claude/actions/") || m.Actions[1].Label != "Decline" {
				t.Fatalf("actions %+v", m.Actions)
			}
			if content == notify.ContentFull {
				if m.Title != "Launch post" || !strings.HasSuffix(m.Message, "We launched today.") {
					t.Fatalf("full content: %q %q", m.Title, m.Message)
				}
				return
			}
			if m.Title != "Major" || m.Message != "Major needs your answer in Launch post" {
				t.Fatalf("summary: %q %q", m.Title, m.Message)
			}
		})
	}
}

// TestFCM: FCM gets a data message for the device's token, sent with an
// access token the service account's signed assertion got.
func TestFCM(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	if _, err := w.s.AddDevice("petra", notify.NewDevice{Kind: "fcm", Token: "phone-token"}); err != nil {
		t.Fatal(err)
	}
	w.s.TurnEnded(relay.TurnEnded{Person: "petra", SessionID: "c", Title: "Plans", Outcome: "success", Answer: "Here they are."})
	w.s.Flush()
	m := <-w.fcm.C
	if m.Token != "phone-token" || m.Project != "major-notes" || m.Data["type"] != "done" || m.Data["session_id"] != "c" ||
		m.Data["title"] != "Major" || m.Data["body"] != "Major has answered in Plans" || m.Data["actions"] != "null" {
		t.Fatalf("message %+v", m)
	}
}

// TestSendsAreBounded: a send follows no redirect to another host (which
// never hears of it), takes at most SendTimeout, reads a bounded answer,
// and connects to no address of this machine whose host the owner did
// not name, whatever name resolves to it.
func TestSendsAreBounded(t *testing.T) {
	t.Parallel()
	var elsewhere atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
	defer other.Close()
	hang := make(chan struct{})
	var sameHost atomic.Int32
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/away":
			http.Redirect(w, r, strings.Replace(other.URL, "127.0.0.1", "localhost", 1)+"/x", http.StatusTemporaryRedirect)
		case "/here":
			http.Redirect(w, r, srv.URL+"/landed", http.StatusTemporaryRedirect)
		case "/landed":
			sameHost.Add(1)
			w.WriteHeader(http.StatusCreated)
		case "/endless":
			w.WriteHeader(http.StatusCreated)
			chunk := make([]byte, 32<<10)
			for {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		case "/hang":
			_, _ = io.Copy(io.Discard, r.Body)
			select {
			case <-hang:
			case <-r.Context().Done():
			}
		}
	}))
	defer srv.Close()
	defer close(hang)
	w := newWorld(t, func(c *notify.Config) {
		c.SendTimeout = 3 * time.Second // only the one that never answers waits it out
		c.AllowHosts = []string{"127.0.0.1", "localhost"}
	})
	send := func(t *testing.T, path string) string {
		t.Helper()
		s := w.push.Subscribe(t)
		s.Endpoint = srv.URL + path
		if _, err := w.s.AddDevice("petra", notify.NewDevice{Kind: "webpush", Subscription: &s}); err != nil {
			t.Fatal(err)
		}
		res := w.s.Test("petra")
		for _, d := range w.s.Devices("petra") {
			_ = w.s.RemoveDevice("petra", d.ID)
		}
		return res[0].Error
	}
	t.Run("a redirect to another host", func(t *testing.T) {
		if err := send(t, "/away"); !strings.Contains(err, "another host") || elsewhere.Load() != 0 {
			t.Fatalf("error %q; the other host got %d requests", err, elsewhere.Load())
		}
	})
	t.Run("a redirect on the same host", func(t *testing.T) {
		if err := send(t, "/here"); err != "" || sameHost.Load() != 1 {
			t.Fatalf("error %q, %d arrived", err, sameHost.Load())
		}
	})
	t.Run("an endless answer", func(t *testing.T) {
		if err := send(t, "/endless"); err != "" {
			t.Fatalf("error %q", err)
		}
	})
	t.Run("a service that never answers", func(t *testing.T) {
		if err := send(t, "/hang"); !strings.Contains(err, "timeout") && !strings.Contains(err, "deadline") {
			t.Fatalf("error %q", err)
		}
	})
	t.Run("an address of this machine not named", func(t *testing.T) {
		dir := t.TempDir()
		before := newWorld(t, func(c *notify.Config) { c.StateDir = dir })
		s := before.push.Subscribe(t)
		s.Endpoint = srv.URL + "/landed"
		if _, err := before.s.AddDevice("petra", notify.NewDevice{Kind: "webpush", Subscription: &s}); err != nil {
			t.Fatal(err)
		}
		before.s.Close()
		// The owner no longer names the host: a device kept from before
		// is a name that resolves to this machine now.
		after := newWorld(t, func(c *notify.Config) { c.StateDir, c.AllowHosts = dir, nil })
		landed := sameHost.Load()
		res := after.s.Test("petra")
		if len(res) != 1 || !strings.Contains(res[0].Error, "not a public address") || sameHost.Load() != landed {
			t.Fatalf("test notification %+v; %d arrived", res, sameHost.Load()-landed)
		}
	})
}

// TestVAPIDKeysKept: the key pair is made on first start, kept mode
// 0600, and the same at the next; a file that holds no pair stops the
// start instead of being replaced.
func TestVAPIDKeysKept(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "notify", "vapid.json")
	first, err := notify.LoadVAPID(path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", st.Mode(), err)
	}
	again, err := notify.LoadVAPID(path)
	if err != nil || again != first || len(first.Public) != 87 {
		t.Fatalf("second start: %v, same %v, public key %q", err, again == first, first.Public)
	}
	if err := os.WriteFile(path, []byte(`{}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := notify.LoadVAPID(path); err == nil {
		t.Fatal("a file without a key pair was accepted")
	}
	if _, err := notify.New(notify.Config{StateDir: dir, Logger: zerolog.Nop()}); err == nil {
		t.Fatal("the service started without its key pair")
	}
}

// TestLongDraftFits: a draft's notification carries its exact words; one
// too long for a push message is cut, and says so, rather than lost.
func TestLongDraftFits(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	short := "Ünïcödé & <b>tags</b> stay exactly as written.\n\nSecond paragraph."
	long := strings.Repeat("Zwölf Boxkämpfer jagen Viktor quer über den großen Sylter Deich. ", 80)
	for i, text := range []string{short, long} {
		w.s.Waiting(relay.Waiting{Person: "sebastian", SessionID: "c", RequestID: string(rune('a' + i)), Kind: "draft",
			Tool: "mcp__linkedin__linkedin_post", What: "the LinkedIn post", Text: text})
		w.clock.Advance(notifyAfter)
	}
	got := w.pushes(t)
	if len(got) != 2 {
		t.Fatalf("%d pushes", len(got))
	}
	bodies := map[string]string{got[0].RequestID: got[0].Body, got[1].RequestID: got[1].Body}
	if bodies["a"] != "Publish the LinkedIn post? Word for word:\n\n"+short {
		t.Fatalf("short draft: %q", bodies["a"])
	}
	b := bodies["b"]
	if !strings.HasSuffix(b, "[cut: open the chat for the whole text]") || !strings.HasPrefix(b, "Publish the LinkedIn post? Word for word:\n\n"+long[:1000]) {
		t.Fatalf("long draft: %q", b)
	}
}

// TestDevicesLiveInThePersonsFolder: each person's devices and own
// settings are files of their folder; a service started again has them,
// and Reload takes a folder that went away (the person moved to another
// server) or came (moved here) into account.
func TestDevicesLiveInThePersonsFolder(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	w := newWorld(t, func(c *notify.Config) { c.StateDir = dir })
	if err := w.s.SetPreferences("sebastian", notify.Preferences{Events: []string{"question"}}); err != nil {
		t.Fatal(err)
	}
	if got := len(w.s.Devices("petra")); got != 0 {
		t.Fatalf("petra has %d devices", got)
	}
	folder := personstate.Dir(dir, "sebastian")
	for _, f := range []string{personstate.DevicesFile, personstate.SettingsFile} {
		if st, err := os.Stat(filepath.Join(folder, personstate.NotifyDir, f)); err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v", f, st, err)
		}
	}
	w.s.Close()
	// The new world adds a device of its own push service.
	again := newWorld(t, func(c *notify.Config) { c.StateDir = dir })
	if got := again.s.Devices("sebastian"); len(got) != 2 || again.s.Preferences("sebastian").Events[0] != "question" {
		t.Fatalf("after a restart: %+v, %+v", got, again.s.Preferences("sebastian"))
	}
	moved := filepath.Join(t.TempDir(), "sebastian")
	if err := os.Rename(folder, moved); err != nil {
		t.Fatal(err)
	}
	if err := again.s.Reload("sebastian"); err != nil || len(again.s.Devices("sebastian")) != 0 || len(again.s.Preferences("sebastian").Events) != 0 {
		t.Fatalf("moved away, sebastian still has %+v, %+v (%v)", again.s.Devices("sebastian"), again.s.Preferences("sebastian"), err)
	}
	if err := os.Rename(moved, folder); err != nil {
		t.Fatal(err)
	}
	if err := again.s.Reload("sebastian"); err != nil || len(again.s.Devices("sebastian")) != 2 {
		t.Fatalf("moved back, sebastian has %+v (%v)", again.s.Devices("sebastian"), err)
	}
}
