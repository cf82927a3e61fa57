package mcpserver_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/majorhq/major/mcpserver"
)

// cliMessages are the JSON-RPC messages the CLI 2.1.330 sent to an SDK MCP
// server named linkedin, in order (from the recorded transcript).
func cliMessages(tb testing.TB) []json.RawMessage {
	tb.Helper()
	f, err := os.Open("testdata/cli-2.1.330-mcp-messages.ndjson")
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var out []json.RawMessage
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		out = append(out, json.RawMessage(append([]byte(nil), sc.Bytes()...)))
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	return out
}

type rpcResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  json.RawMessage `json:"result"`
	Error   *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func TestHandleMessageReplaysCLITranscript(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	msgs := cliMessages(t)
	if len(msgs) != 4 {
		t.Fatalf("testdata has %d messages", len(msgs))
	}
	var got []rpcResponse
	for _, m := range msgs {
		var call struct {
			Method string `json:"method"`
			Params struct {
				Name      string         `json:"name"`
				Arguments map[string]any `json:"arguments"`
			} `json:"params"`
		}
		if json.Unmarshal(m, &call) == nil && call.Method == "tools/call" {
			permissionCheck(w.srv, "sebastian", call.Params.Name, call.Params.Arguments)
		}
		out, err := w.srv.HandleMessage(context.Background(), "sebastian", m)
		if err != nil {
			t.Fatal(err)
		}
		var r rpcResponse
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("response %s: %v", out, err)
		}
		if r.JSONRPC != "2.0" || r.Error != nil {
			t.Fatalf("response to %s: %s", m, out)
		}
		got = append(got, r)
	}

	// initialize: the CLI's protocol version is accepted as it is.
	var init struct {
		ProtocolVersion string `json:"protocolVersion"`
		Capabilities    struct {
			Tools *json.RawMessage `json:"tools"`
		} `json:"capabilities"`
		ServerInfo struct{ Name string } `json:"serverInfo"`
	}
	if err := json.Unmarshal(got[0].Result, &init); err != nil {
		t.Fatal(err)
	}
	if string(got[0].ID) != "0" || init.ProtocolVersion != "2025-11-25" || init.Capabilities.Tools == nil || init.ServerInfo.Name != "linkedin" {
		t.Fatalf("initialize answer: id %s %s", got[0].ID, got[0].Result)
	}
	// notifications/initialized: the empty success the CLI accepts.
	if string(got[1].ID) != "0" || string(got[1].Result) != "{}" {
		t.Fatalf("notification answer: %+v", got[1])
	}
	// tools/list
	var list struct {
		Tools []struct{ Name string } `json:"tools"`
	}
	if err := json.Unmarshal(got[2].Result, &list); err != nil || len(list.Tools) != 4 || string(got[2].ID) != "1" {
		t.Fatalf("tools/list answer: %s (%v)", got[2].Result, err)
	}
	// tools/call linkedin_post {"text":"hello"}
	var call struct {
		Content []struct{ Type, Text string } `json:"content"`
		IsError bool                          `json:"isError"`
	}
	if err := json.Unmarshal(got[3].Result, &call); err != nil || string(got[3].ID) != "2" {
		t.Fatalf("tools/call answer: %s (%v)", got[3].Result, err)
	}
	if call.IsError || len(call.Content) != 1 || call.Content[0].Type != "text" || call.Content[0].Text != "Posted to LinkedIn: urn:li:share:7001" {
		t.Fatalf("tools/call result: %+v", call)
	}
	reqs := w.api.Requests()
	if len(reqs) != 1 || reqs[0].Token != accounts["sebastian"].AccessToken || reqs[0].Body["commentary"] != "hello" {
		t.Fatalf("LinkedIn saw %+v", reqs)
	}
}

func TestHandleMessageWithoutPerson(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	msgs := cliMessages(t)
	out, err := w.srv.HandleMessage(context.Background(), "", msgs[3])
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Result struct {
			IsError bool `json:"isError"`
			Content []struct{ Text string }
		} `json:"result"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatal(err)
	}
	if !r.Result.IsError || len(r.Result.Content) != 1 || !strings.HasPrefix(r.Result.Content[0].Text, "Error: no person") {
		t.Fatalf("answer: %s", out)
	}
	if n := len(w.api.Requests()); n != 0 {
		t.Fatalf("LinkedIn got %d requests", n)
	}
}

func TestHandleMessageProtocolErrors(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	tests := []struct {
		name string
		msg  string
		code int
	}{
		{name: "not JSON", msg: `{"jsonrpc":`, code: -32700},
		{name: "unknown method", msg: `{"jsonrpc":"2.0","id":5,"method":"nope/nope"}`, code: -32601},
		{name: "unknown tool", msg: `{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"linkedin_delete","arguments":{}}}`, code: -32602},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, err := w.srv.HandleMessage(context.Background(), "petra", json.RawMessage(tt.msg))
			if err != nil {
				t.Fatal(err)
			}
			var r rpcResponse
			if err := json.Unmarshal(out, &r); err != nil {
				t.Fatal(err)
			}
			if r.Error == nil || r.Error.Code != tt.code {
				t.Fatalf("answer %s, want error code %d", out, tt.code)
			}
		})
	}
}

// From a chat, a post, comment or reply runs only as the chat's
// permission check let it through (Approve), once: anything else in the
// person's sandbox can write an mcp_message onto the CLI's output, and
// such a call never passed the check.
func TestPublishingNeedsThePermissionCheck(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	call := json.RawMessage(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"linkedin_post","arguments":{"text":"unasked"}}}`)
	for i, approve := range []bool{false, true, false} {
		if approve {
			w.srv.Approve("sebastian", mcpserver.ToolPost, json.RawMessage(`{"text":"unasked"}`))
		}
		out, err := w.srv.HandleMessage(context.Background(), "sebastian", call)
		if err != nil {
			t.Fatal(err)
		}
		posted := strings.Contains(string(out), "Posted to LinkedIn")
		if posted != approve {
			t.Fatalf("call %d (approved %v): %s", i, approve, out)
		}
	}
	if n := len(w.api.Requests()); n != 1 {
		t.Fatalf("LinkedIn got %d requests, want the approved one", n)
	}
}
