package httpapi_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/majorhq/major/clientevent"
	"github.com/majorhq/major/httpapi/httpapitest"
	"github.com/majorhq/major/relay"
	"github.com/majorhq/major/relay/relaytest"
)

// An error that names a server path (a CLI that cannot be started)
// reaches the person without it, the path in their own folder relative
// to it: as the compat stream's error line and as the chat's error.
func TestErrorsShowNoServerPaths(t *testing.T) {
	const cause = "start /var/lib/major/claude-home/bin/claude in /srv/notes/sebastian: no such file"
	h := newHarness(t, harnessOpts{
		paths: clientevent.ServerPaths{VaultRoot: "/srv/notes", Hidden: []string{"/var/lib/major"}},
		setup: func(f *relaytest.CLI) {
			f.SendFunc = func(_ context.Context, text string) error {
				if text == "busy" {
					return fmt.Errorf("%w: %s", relay.ErrUnavailable, cause)
				}
				return errors.New(cause)
			}
		},
	})
	const want = "start [server path] in .: no such file"
	id := h.NewSession(t)

	_, evs := h.ChatStream(t, "sebastian", "", httpapitest.JSONBody(map[string]any{"message": "hi", "session_id": id}))
	last := evs[len(evs)-1]
	if got := httpapitest.Str(last, "message"); httpapitest.Str(last, "type") != "error" || got != "Your message could not be run: "+want {
		t.Errorf("the compat stream ended with %q", got)
	}
	resp := h.Request(t, "POST", "/api/claude/chat", "sebastian", "application/json", httpapitest.JSONBody(map[string]any{"message": "busy", "session_id": id}))
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if wantBody := `{"error":"` + relay.ErrUnavailable.Error() + ": " + want + `"}`; resp.StatusCode != 503 || string(body) != wantBody {
		t.Errorf("chat answered %d %s, want 503 %s", resp.StatusCode, body, wantBody)
	}
}
