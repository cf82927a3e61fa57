package clientevent_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/majorhq/major/clientevent"
	"github.com/majorhq/major/supervisor"
)

// replay turns the recorded two-way session of the real CLI (four turns:
// a question, a LinkedIn post over the SDK MCP server, a WebFetch, and an
// interrupted answer) into the supervisor's events, as the supervisor
// reports them, and translates them. It returns one line per client event
// other than cli: its type and the fields that say what it shows.
func replay(t *testing.T) (lines []string, tr *clientevent.Translator) {
	lines, _, tr = replayWithCLI(t)
	return lines, tr
}

// replayWithCLI is replay, with the bodies of the cli events too.
func replayWithCLI(t *testing.T) (lines []string, clis [][]byte, tr *clientevent.Translator) {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "supervisor", "testdata", "transcript-cli-2.1.330.ndjson"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr = clientevent.NewTranslator("s1")
	at := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	emit := func(ev supervisor.Event) {
		for _, o := range tr.Translate(ev) {
			body, err := clientevent.Marshal(o.Body)
			if err != nil {
				t.Fatal(err)
			}
			if o.Body.EventType() == "cli" {
				clis = append(clis, body)
				if !strings.HasPrefix(string(body), `{"type":"cli","event":{`) {
					t.Fatalf("cli event %s", body)
				}
				continue
			}
			var m map[string]any
			if err := json.Unmarshal(body, &m); err != nil {
				t.Fatal(err)
			}
			line := m["type"].(string)
			for _, k := range []string{"delta", "message", "name", "outcome"} {
				if v, ok := m[k].(string); ok {
					line += " " + k + "=" + v[:min(len(v), 32)]
				}
			}
			if o.BeginTurn {
				line += " [begin]"
			}
			if o.Terminal {
				line += " [end]"
			}
			lines = append(lines, line)
		}
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var rec struct {
			Dir string          `json:"dir"`
			Msg json.RawMessage `json:"msg"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatal(err)
		}
		m, err := supervisor.DecodeMessage(rec.Msg)
		if err != nil {
			t.Fatal(err)
		}
		at = at.Add(100 * time.Millisecond)
		switch {
		case rec.Dir == "to_cli" && m.Type == "user":
			var u struct {
				Message struct {
					Content string `json:"content"`
				} `json:"message"`
			}
			_ = json.Unmarshal(rec.Msg, &u)
			emit(supervisor.Event{Kind: supervisor.EventTurnStart, Text: u.Message.Content, Time: at})
		case rec.Dir != "from_cli" || m.Type == "control_request" || m.Type == "control_response":
			// The control protocol is the supervisor's, not the clients'.
		case m.Type == "result":
			emit(supervisor.Event{Kind: supervisor.EventCLI, Msg: m, Time: at})
			emit(supervisor.Event{Kind: supervisor.EventTurnEnd, Msg: m, Time: at,
				Interrupted: m.Subtype == "error_during_execution"})
		default:
			emit(supervisor.Event{Kind: supervisor.EventCLI, Msg: m, Time: at})
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(clis) != 68 {
		t.Fatalf("%d cli events, want one for each of the CLI's 68 messages outside the control protocol", len(clis))
	}
	return lines, clis, tr
}

// The real CLI's session becomes the client events the seed clients and
// the events stream read: the person's message opens each turn; a tool
// call is a status line and a tool event, its result a tool_result event
// and another status line; the answer is text (once, though the CLI sends
// it both as deltas and as a whole message); an interrupted turn says so
// and ends with done.
func TestTranslateTheCLIsSession(t *testing.T) {
	got, tr := replay(t)
	want := []string{
		`turn_start message=[[script:ask]] [begin]`,
		`status message=Running tool: AskUserQuestion`,
		`tool name=AskUserQuestion`,
		`tool_result name=AskUserQuestion`,
		`status message=Tool finished: AskUserQuestion`,
		`text delta=RESULT<<Your questions have been`,
		`done outcome=success [end]`,
		`turn_start message=[[script:linkedin hello]] [begin]`,
		`status message=Running tool: mcp__linkedin__lin`,
		`tool name=mcp__linkedin__linkedin_post`,
		`tool_result name=mcp__linkedin__linkedin_post`,
		`status message=Tool finished: mcp__linkedin__li`,
		`text delta=RESULT<<[{"type": "text", "text"`,
		`done outcome=success [end]`,
		`turn_start message=[[script:webfetch https://exampl [begin]`,
		`status message=Running tool: WebFetch https://e`,
		`tool name=WebFetch`,
		`tool_result name=WebFetch`,
		`status message=Tool finished: WebFetch`,
		`text delta=RESULT<<Unable to verify if doma`,
		`done outcome=success [end]`,
		`turn_start message=[[script:slow]] [begin]`,
		`text delta=tick `,
		`status message=Interrupted`,
		`done outcome=interrupted [end]`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("client events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The next turn resumes after the conversation's last answer.
	if tr.LastEntry() == "" {
		t.Fatal("no last entry after four answered turns")
	}
}

// Every compat line has exactly the seed's keys, and events the seed
// clients do not know have none.
func TestCompatKeepsTheSeedsKeys(t *testing.T) {
	sum := clientevent.Summary{Outcome: "error", DurationMS: 5}
	for _, c := range []struct {
		body clientevent.Body
		want string
	}{
		{clientevent.Text{Type: "text", Delta: "a <b> & c"}, `{"type":"text","delta":"a <b> & c"}`},
		{clientevent.Status{Type: "status", Message: "retrying", Kind: clientevent.KindOverloaded, Status: 529, Attempt: 1},
			`{"type":"status","message":"retrying"}`},
		{clientevent.Tool{Type: "tool", Name: "Read", Input: json.RawMessage(`{"file_path":"a.md"}`), ID: "t1"},
			`{"type":"tool","name":"Read","input":{"file_path":"a.md"}}`},
		{clientevent.Done{Type: "done", SessionID: "s1", Summary: sum}, `{"type":"done","session_id":"s1"}`},
		{clientevent.Error{Type: "error", Message: "The model is overloaded.", Kind: clientevent.KindOverloaded, Status: 529, Summary: sum},
			`{"type":"error","message":"The model is overloaded."}`},
		{clientevent.TurnStart{Type: "turn_start", Message: "hi"}, ``},
		{clientevent.ToolResult{Type: "tool_result", ID: "t1", Name: "Read", Content: "x"}, ``},
	} {
		body, err := clientevent.Marshal(c.body)
		if err != nil {
			t.Fatal(err)
		}
		if got := string(clientevent.Compat(c.body.EventType(), body)); got != c.want {
			t.Errorf("compat of %s:\n got %s\nwant %s", body, got, c.want)
		}
	}
}

// A turn that fails ends with an error event whose kind names what failed
// and whose message the person can act on; the CLI's own words, which
// name internal addresses, are not in it.
func TestFailedTurnsAreNamed(t *testing.T) {
	status := func(n int) *int { return &n }
	for _, c := range []struct {
		name string
		end  supervisor.Event
		kind string
		says string
	}{
		{"overloaded", supervisor.Event{Msg: &supervisor.Message{Type: "result", IsError: true, TerminalReason: "api_error",
			APIErrorStatus: status(529), Result: "API Error: 529 from http://10.0.0.7"}}, clientevent.KindOverloaded, "overloaded"},
		{"refused key", supervisor.Event{Msg: &supervisor.Message{Type: "result", IsError: true, TerminalReason: "api_error",
			APIErrorStatus: status(401)}}, clientevent.KindAuth, "API key"},
		{"no answer", supervisor.Event{Msg: &supervisor.Message{Type: "result", IsError: true, TerminalReason: "api_error"}},
			clientevent.KindNetwork, "could not be reached"},
		{"too many steps", supervisor.Event{Msg: &supervisor.Message{Type: "result", Subtype: "error_max_turns", IsError: true}},
			clientevent.KindMaxTurns, "too many steps"},
		{"budget", supervisor.Event{Msg: &supervisor.Message{Type: "result", Subtype: "error_max_budget_usd", IsError: true}},
			clientevent.KindBudget, "budget"},
		{"stalled", supervisor.Event{Err: supervisor.ErrStalled}, clientevent.KindStalled, "stopped responding"},
		{"crashed", supervisor.Event{Err: errors.Join(supervisor.ErrProcessExited, errors.New("signal: killed"))},
			clientevent.KindCrashed, "crashed"},
		{"refused by the machine's policy", supervisor.Event{Err: fmt.Errorf("start turn: %w", &supervisor.StartRefused{
			Reason: "sideload_flags_disabled", Setting: "disableSideloadFlags", Detail: "--plugin-dir is disabled by /etc/claude-code"})},
			clientevent.KindConfig, "policy on the server's machine forbids the MCP servers or skills"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := clientevent.NewTranslator("s1")
			tr.Translate(supervisor.Event{Kind: supervisor.EventTurnStart, Text: "hi", Time: time.Now()})
			c.end.Kind, c.end.Time = supervisor.EventTurnEnd, time.Now()
			outs := tr.Translate(c.end)
			if len(outs) != 1 || !outs[0].Terminal {
				t.Fatalf("turn end gave %+v, want one terminal event", outs)
			}
			e, ok := outs[0].Body.(clientevent.Error)
			if !ok || e.Kind != c.kind || e.Outcome != "error" || !strings.Contains(e.Message, c.says) {
				t.Fatalf("error event %+v, want kind %s saying %q", outs[0].Body, c.kind, c.says)
			}
			if strings.Contains(e.Message, "10.0.0.7") {
				t.Fatalf("the person's message names an internal address: %s", e.Message)
			}
		})
	}
}

// The session's spending sums its turns' costs, carried on from a restored
// session; each done says the turn's cost and the session's.
func TestSpendingAddsUp(t *testing.T) {
	tr := clientevent.NewTranslator("s1")
	tr.Restore(1.5, "entry-7")
	start := supervisor.Event{Kind: supervisor.EventTurnStart, Text: "hi", Time: time.Now()}
	outs := tr.Translate(start)
	if ts := outs[0].Body.(clientevent.TurnStart); ts.CLIParentID != "entry-7" {
		t.Fatalf("turn start resumes at %q, want the restored entry", ts.CLIParentID)
	}
	outs = tr.Translate(supervisor.Event{Kind: supervisor.EventTurnEnd, Time: start.Time.Add(2 * time.Second),
		Msg: &supervisor.Message{Type: "result", Subtype: "success"}, Usage: &supervisor.Usage{CostUSD: 0.25}})
	d := outs[0].Body.(clientevent.Done)
	if *d.CostUSD != 0.25 || *d.SessionCostUSD != 1.75 || d.DurationMS != 2000 || tr.Spent() != 1.75 {
		t.Fatalf("done %+v, spent %v", d, tr.Spent())
	}
}

// An assistant message's entry id is kept only in the CLI's form: the
// sandbox can write onto the CLI's output, and the id is put on a
// command line when the conversation is rewound to it.
func TestLastEntryTakesOnlyTheCLIsForm(t *testing.T) {
	for _, tt := range []struct {
		name, uuid string
		kept       bool
	}{
		{"a UUID", "0f8b6f4e-6a55-4c55-9f43-1d2f6e8c1a10", true},
		{"a megabyte", strings.Repeat("a", 1<<20), false},
		{"a flag", "--settings=/etc/x", false},
		{"a line break", "a\nb", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tr := clientevent.NewTranslator("s1")
			tr.Translate(supervisor.Event{Kind: supervisor.EventTurnStart, Text: "hi", Time: time.Now()})
			msg := &supervisor.Message{Type: "assistant", UUID: tt.uuid, Message: &supervisor.APIMessage{ID: "m1", Role: "assistant"}}
			tr.Translate(supervisor.Event{Kind: supervisor.EventCLI, Msg: msg, Time: time.Now()})
			if got := tr.LastEntry() == tt.uuid; got != tt.kept {
				t.Fatalf("kept %v, want %v", got, tt.kept)
			}
		})
	}
}
