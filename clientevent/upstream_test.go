package clientevent_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/majorhq/major/clientevent"
	"github.com/majorhq/major/supervisor"
)

// The CLI's messages of a model call that failed, as the CLI 2.1.330
// writes them (a retry notice given an error text, to stand for CLIs that
// put one there).
const (
	retryLine = `{"type":"system","subtype":"api_retry","attempt":1,"max_retries":1,"retry_delay_ms":600,"error_status":500,` +
		`"error":"server_error","error_message":"500 {\"type\":\"error\",\"error\":{\"message\":\"Internal Server Error\"}} from 127.0.0.1:42697",` +
		`"session_id":"c1","uuid":"u0"}`
	apiErrorLine = `{"type":"assistant","message":{"id":"m1","model":"<synthetic>","role":"assistant","type":"message","content":[{"type":"text",` +
		`"text":"API Error: 500 Internal Server Error. If it persists, check your inference gateway (127.0.0.1:42697)."}]},` +
		`"parent_tool_use_id":null,"session_id":"c1","uuid":"u1","error":"server_error","is_api_error_message":true,` +
		`"api_error_status":500,"api_error_type":"api_error","api_error":"connect to 127.0.0.1:42697 failed"}`
	resultLine = `{"type":"result","subtype":"success","is_error":true,"terminal_reason":"api_error","api_error_status":500,` +
		`"api_error_type":"api_error","result":"API Error: 500 Internal Server Error. If it persists, check your inference gateway (127.0.0.1:42697).",` +
		`"errors":["Internal Server Error at 127.0.0.1:42697"],"session_id":"c1","uuid":"u2"}`
)

// upstream is what must not reach a client of those messages.
var upstream = []string{"Internal Server Error", "API Error", "127.0.0.1:42697"}

func decode(tb testing.TB, line string) *supervisor.Message {
	tb.Helper()
	m, err := supervisor.DecodeMessage([]byte(line))
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// A failed model call's messages reach clients as cli events marked
// withheld, with the error's text replaced by the sentence the turn's
// error event (or the retry's status) says; the text itself is handed
// out for the log, and the rest of each message is kept.
func TestUpstreamErrorTextIsWithheld(t *testing.T) {
	tr := clientevent.NewTranslator("s1")
	at := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	tr.Translate(supervisor.Event{Kind: supervisor.EventTurnStart, Text: "hi", Time: at})
	var clis []string
	var withheld []string
	var outs []clientevent.Out
	for _, line := range []string{retryLine, apiErrorLine, resultLine} {
		outs = append(outs, tr.Translate(supervisor.Event{Kind: supervisor.EventCLI, Msg: decode(t, line), Time: at})...)
	}
	outs = append(outs, tr.Translate(supervisor.Event{Kind: supervisor.EventTurnEnd, Msg: decode(t, resultLine), Time: at})...)
	var sentence, status string
	for _, o := range outs {
		body, err := clientevent.Marshal(o.Body)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range upstream {
			if bytes.Contains(body, []byte(s)) {
				t.Errorf("a client reads %q: %s", s, body)
			}
		}
		switch b := o.Body.(type) {
		case clientevent.CLI:
			if !b.Withheld || !json.Valid(b.Event) {
				t.Errorf("cli event not marked withheld: %s", body)
			}
			clis = append(clis, string(body))
			withheld = append(withheld, o.Withheld...)
		case clientevent.Error:
			sentence = b.Message
		case clientevent.Status:
			status = b.Message
		}
	}
	if len(clis) != 3 || sentence == "" || status == "" {
		t.Fatalf("cli events %d, error %q, status %q", len(clis), sentence, status)
	}
	for i, want := range []string{
		`"error_message":"` + status + `"`,
		`"content":[{"text":"` + sentence + `","type":"text"}]`,
		`"result":"` + sentence + `"`,
	} {
		if !strings.Contains(clis[i], want) {
			t.Errorf("cli event %d lacks %s:\n%s", i, want, clis[i])
		}
	}
	// What tells a client what happened stays: the error class, status
	// and type, the ids.
	for _, want := range []string{`"error":"server_error"`, `"api_error_status":500`, `"uuid":"u1"`, `"is_api_error_message":true`} {
		if !strings.Contains(clis[1], want) {
			t.Errorf("the API error message lost %s: %s", want, clis[1])
		}
	}
	if !strings.Contains(clis[2], `"errors":["`+sentence+`"]`) || !strings.Contains(clis[1], `"api_error":"`+sentence+`"`) {
		t.Errorf("errors or api_error kept: %s\n%s", clis[1], clis[2])
	}
	// The log gets every text that was taken out.
	log := strings.Join(withheld, "\n")
	for _, want := range []string{"from 127.0.0.1:42697", "check your inference gateway", "connect to 127.0.0.1:42697 failed", "Internal Server Error at"} {
		if !strings.Contains(log, want) {
			t.Errorf("withheld text lacks %q:\n%s", want, log)
		}
	}
}

// A turn's own messages are left alone: an interrupted turn's result, a
// retry notice with only its error class, the model's own answer.
func TestOnlyUpstreamErrorsAreWithheld(t *testing.T) {
	for _, line := range []string{
		`{"type":"result","subtype":"error_during_execution","is_error":true,"terminal_reason":"aborted_streaming","errors":["[ede_diagnostic] result_type=user"],"session_id":"c1"}`,
		`{"type":"system","subtype":"api_retry","attempt":1,"max_retries":10,"retry_delay_ms":600,"error_status":529,"error":"overloaded","session_id":"c1","uuid":"u0"}`,
		`{"type":"assistant","message":{"id":"m2","role":"assistant","content":[{"type":"text","text":"API Error is a fine name for a band"}]},"session_id":"c1","uuid":"u3"}`,
	} {
		tr := clientevent.NewTranslator("s1")
		outs := tr.Translate(supervisor.Event{Kind: supervisor.EventCLI, Msg: decode(t, line), Time: time.Now()})
		c := outs[0].Body.(clientevent.CLI)
		if c.Withheld || string(c.Event) != line || outs[0].Withheld != nil {
			t.Errorf("changed %s:\n%s", line, c.Event)
		}
	}
}

// A log written before upstream error text was withheld is replayed as
// a live event would go out; what is withheld already, or carries no
// error, is replayed as it is.
func TestRecordedCLIWithholdsOldErrorText(t *testing.T) {
	old := clientevent.AppendCLI(nil, clientevent.CLI{Type: "cli", Event: json.RawMessage(apiErrorLine)})
	got := clientevent.RecordedCLI(old)
	for _, s := range upstream {
		if bytes.Contains(got, []byte(s)) {
			t.Errorf("replayed event shows %q: %s", s, got)
		}
	}
	if !bytes.HasPrefix(got, []byte(`{"type":"cli","withheld":true,"event":{`)) ||
		!bytes.Contains(got, []byte(`"text":"The model's API answered with an error (HTTP 500); please try again."`)) {
		t.Fatalf("replayed: %s", got)
	}
	if again := clientevent.RecordedCLI(got); !bytes.Equal(again, got) {
		t.Fatalf("a withheld event changed again:\n%s\n%s", got, again)
	}
	plain := clientevent.AppendCLI(nil, clientevent.CLI{Type: "cli", Event: json.RawMessage(`{"type":"assistant","is_error":true}`)})
	if got := clientevent.RecordedCLI(plain); !bytes.Equal(got, plain) {
		t.Fatalf("a message without an upstream error changed: %s", got)
	}
}

// The recorded session of the real CLI, redacted for the server it ran
// on (vault /srv/notes, CLI home /home/major, the CLI's socket under
// /run): no cli event names those folders, the person's folder shows as
// ".", and the client events are those the seed clients read before.
func TestRecordedSessionWithoutServerPaths(t *testing.T) {
	lines, clis, _ := replayWithCLI(t)
	if len(lines) == 0 {
		t.Fatal("no client events")
	}
	r := clientevent.ServerPaths{VaultRoot: "/srv/notes", Home: "/home/major", Hidden: []string{"/run"}}.Redactor("sebastian")
	var all bytes.Buffer
	for _, c := range clis {
		b := r.JSON(c)
		if !json.Valid(b) {
			t.Fatalf("redacted event is not JSON: %s", b)
		}
		all.Write(b)
	}
	for _, s := range []string{"/srv/notes", "/home/major", "/run/", "cc-socks"} {
		if bytes.Contains(all.Bytes(), []byte(s)) {
			t.Errorf("a cli event names %s", s)
		}
	}
	if !bytes.Contains(all.Bytes(), []byte(`"cwd":"."`)) {
		t.Error("the CLI's folder is not shown as the person's")
	}
}
