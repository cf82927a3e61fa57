package relay

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/clientevent"
	"github.com/majorhq/major/sessionstore"
	"github.com/majorhq/major/supervisor"
)

// serverPaths is a server as in production.
var serverPaths = clientevent.ServerPaths{VaultRoot: "/srv/notes", Hidden: []string{"/var/lib/major"}, Home: "/home/major"}

// serverSecrets are what of serverPaths, and of a failed model call,
// no client may read.
var serverSecrets = []string{"/srv/notes", "/var/lib/major", "/home/major", "~/.claude", "API Error", "127.0.0.1:42697"}

// cliLine is a CLI message as the supervisor hands it over.
func cliLine(tb testing.TB, line string) supervisor.Event {
	tb.Helper()
	m, err := supervisor.DecodeMessage([]byte(line))
	if err != nil {
		tb.Fatal(err)
	}
	return supervisor.Event{Kind: supervisor.EventCLI, Msg: m, Time: time.Now()}
}

// delta is a streamed piece of the model's text.
func delta(tb testing.TB, text string) supervisor.Event {
	tb.Helper()
	b, _ := json.Marshal(map[string]any{"type": "stream_event", "event": map[string]any{"type": "content_block_delta", "index": 0,
		"delta": map[string]any{"type": "text_delta", "text": text}}, "session_id": "c1"})
	return cliLine(tb, string(b))
}

// aTurnNamingServerPaths is a turn whose CLI names the server's folders
// (its init message, a tool call and result, the model's text in small
// pieces) and whose second model call fails.
func aTurnNamingServerPaths(tb testing.TB) []supervisor.Event {
	tb.Helper()
	now := time.Now()
	evs := []supervisor.Event{
		{Kind: supervisor.EventTurnStart, Text: "what is in /srv/notes/sebastian/a.md?", Time: now},
		cliLine(tb, `{"type":"system","subtype":"init","cwd":"/srv/notes/sebastian","plugins":[{"name":"major","path":"/var/lib/major/session-config/skills/ab/major"}],"memory_paths":{"auto":"/home/major/.claude/projects/-srv-notes-sebastian/memory/"},"session_id":"c1"}`),
		cliLine(tb, `{"type":"assistant","message":{"id":"m1","role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Read","input":{"file_path":"/srv/notes/petra/b.md"}}]},"session_id":"c1","uuid":"u1"}`),
		cliLine(tb, `{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","is_error":true,"content":"Access denied: \"/srv/notes/petra/b.md\" is outside your vault."}]},"session_id":"c1","uuid":"u2"}`),
	}
	// The model's answer, a few bytes at a time, names a server path and
	// one of the person's.
	answer := "It is not in /var/lib/major/state nor ~/.claude/x; your note is /srv/notes/sebastian/a.md."
	for i := 0; i < len(answer); i += 3 {
		evs = append(evs, delta(tb, answer[i:min(i+3, len(answer))]))
	}
	result := cliLine(tb, `{"type":"result","subtype":"success","is_error":true,"terminal_reason":"api_error","api_error_status":500,"api_error_type":"api_error","result":"API Error: 500 check your inference gateway (127.0.0.1:42697)","session_id":"c1"}`)
	return append(evs,
		cliLine(tb, `{"type":"assistant","message":{"id":"m2","role":"assistant","content":[{"type":"text","text":"API Error: 500 check your inference gateway (127.0.0.1:42697)"}]},"session_id":"c1","uuid":"u3","error":"server_error","is_api_error_message":true,"api_error_status":500,"api_error_type":"api_error"}`),
		result,
		supervisor.Event{Kind: supervisor.EventTurnEnd, Msg: result.Msg, Time: now.Add(time.Second)},
	)
}

// clientView is everything the session's clients can read: every event,
// the compat and the rich history, the sessions list; with joined, the
// text events joined too.
func clientView(tb testing.TB, c *Session, joined bool) string {
	tb.Helper()
	var all bytes.Buffer
	var text strings.Builder
	for _, ev := range c.Stream().Events(0) {
		all.Write(ev.Line)
		all.WriteByte('\n')
		if ev.Type == "text" && joined {
			var t clientevent.Text
			_ = json.Unmarshal(ev.Line, &t)
			text.WriteString(t.Delta)
		}
	}
	hist, _ := json.Marshal(c.History())
	rich, _ := json.Marshal(c.Messages())
	info, _ := json.Marshal(c.Info())
	return all.String() + "\n" + text.String() + "\n" + string(hist) + "\n" + string(rich) + "\n" + string(info)
}

// checkClientView fails for each secret the view shows, and for each
// sign of the redaction it lacks.
func checkClientView(tb testing.TB, view string) {
	tb.Helper()
	for _, s := range serverSecrets {
		if strings.Contains(view, s) {
			tb.Errorf("clients read %q:\n%s", s, view)
		}
	}
	for _, want := range []string{
		`"cwd":"."`,
		`"path":"[server path]"`,
		`what is in a.md?`,
		`"file_path":"[server path]"`,
		`It is not in [server path] nor [server path]; your note is a.md.`,
		`"withheld":true`,
		`[Failed: The model's API answered with an error (HTTP 500); please try again.]`,
	} {
		if !strings.Contains(view, want) {
			tb.Errorf("clients do not read %s", want)
		}
	}
}

// A live session: every event, the histories and the sessions list show
// the person's paths relative to their folder and no other server path,
// nor the model API's error text, which the log keeps with the session.
func TestSessionShowsNoServerPaths(t *testing.T) {
	var logs bytes.Buffer
	launch := LauncherFunc(func(p SessionParams) CLI {
		return supervisor.NewCLI(supervisor.CLIConfig{ID: p.ID, Person: p.Person, Sink: p.Sink})
	})
	s, err := NewRegistry(RegistryConfig{Launcher: launch, ServerPaths: serverPaths, Logger: zerolog.New(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, _ := s.GetOrCreate("", "sebastian")
	for _, ev := range aTurnNamingServerPaths(t) {
		c.Publish(ev)
	}
	checkClientView(t, clientView(t, c, true))
	var logged bool
	for _, line := range strings.Split(logs.String(), "\n") {
		logged = logged || strings.Contains(line, c.ID) && strings.Contains(line, "check your inference gateway (127.0.0.1:42697)")
	}
	if !logged {
		t.Errorf("the log lacks the model API's error of session %s:\n%s", c.ID, logs.String())
	}
	if got := s.ClientText("sebastian", "cannot start /var/lib/major/x: denied"); got != "cannot start [server path]: denied" {
		t.Errorf("an error's text reads %q", got)
	}
}

// A log written before the server took its paths and upstream error
// text out of events is replayed without them: each event, and the
// histories.
func TestOldLogsReplayWithoutServerPaths(t *testing.T) {
	st, err := sessionstore.New(t.TempDir(), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	const id = "old-session"
	if err := st.SaveIndex("sebastian", id, meta{ID: id, Person: "sebastian", Created: time.Now(), LastActivity: time.Now()}); err != nil {
		t.Fatal(err)
	}
	// As an older server logged them: a session with no paths to hide,
	// whose events stay in memory as they were published (read back, they
	// would be redacted).
	old, err := NewRegistry(RegistryConfig{Launcher: LauncherFunc(func(p SessionParams) CLI {
		return supervisor.NewCLI(supervisor.CLIConfig{ID: p.ID, Person: p.Person, Sink: p.Sink})
	}), Store: st, EvictAfter: -1, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	c, err := old.Get(id, "sebastian")
	if err != nil {
		t.Fatal(err)
	}
	// The old server sent the CLI's API error message as it was.
	c.stream.redact, c.hold = nil, nil
	for _, ev := range aTurnNamingServerPaths(t) {
		if ev.Kind == supervisor.EventCLI && ev.Msg.IsAPIErrorMessage || ev.Kind == supervisor.EventCLI && ev.Msg.Type == "result" {
			c.mu.Lock()
			c.stream.publishJSON(clientevent.CLI{Type: "cli", Event: ev.Msg.Raw}, false, false)
			c.mu.Unlock()
			continue
		}
		c.Publish(ev)
	}
	if view := clientView(t, c, true); !strings.Contains(view, "/srv/notes/petra") || !strings.Contains(view, "API Error") {
		t.Fatalf("the old log holds no server path or error text:\n%s", view)
	}
	old.Close()

	s, err := NewRegistry(RegistryConfig{Launcher: LauncherFunc(func(p SessionParams) CLI {
		return supervisor.NewCLI(supervisor.CLIConfig{ID: p.ID, Person: p.Person, Sink: p.Sink})
	}), Store: st, ServerPaths: serverPaths, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err = s.Get(id, "sebastian")
	if err != nil {
		t.Fatal(err)
	}
	// Each event alone: a path the old server logged across two text
	// events stays in two (the histories join them before redacting).
	checkClientView(t, clientView(t, c, false))
}
