package relay_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/majorhq/major/relay"
	"github.com/majorhq/major/relay/relaytest"
	"github.com/majorhq/major/supervisor"
)

// cliLine is v as a line of the CLI's output.
func cliLine(tb testing.TB, v any) supervisor.Event {
	tb.Helper()
	line, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	m, err := supervisor.DecodeMessage(line)
	if err != nil {
		tb.Fatal(err)
	}
	return supervisor.Event{Kind: supervisor.EventCLI, Msg: m, Time: time.Now()}
}

// modelSays is an assistant message with one content block.
func modelSays(tb testing.TB, msgID string, block map[string]any) supervisor.Event {
	return cliLine(tb, map[string]any{"type": "assistant", "message": map[string]any{
		"id": msgID, "role": "assistant", "content": []any{block}}})
}

// toolResultOf is the CLI's user message with a tool's result.
func toolResultOf(tb testing.TB, id, content string) supervisor.Event {
	return cliLine(tb, map[string]any{"type": "user", "message": map[string]any{
		"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": id, "content": content, "is_error": true}}}})
}

// shownSoFar is the text the clients got so far, and the terminal event
// with its outcome ("" while the turn runs).
func shownSoFar(chat *relay.Session) (text, end string) {
	for _, ev := range chat.Stream().Events(0) {
		var e struct {
			Delta   string `json:"delta"`
			Outcome string `json:"outcome"`
		}
		_ = json.Unmarshal(ev.Line, &e)
		switch ev.Type {
		case "text":
			text += e.Delta
		case "done", "error":
			end = ev.Type + ":" + e.Outcome
		}
	}
	return text, end
}

// turnOutcome waits for the turn's end and returns shownSoFar.
func turnOutcome(tb testing.TB, chat *relay.Session) (text, end string) {
	tb.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if text, end = shownSoFar(chat); end != "" {
			return text, end
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the turn did not end; text so far %q", text)
		}
	}
}

// The model's publishing call in a turn: text it writes after the call
// in the same message waits until the call is decided. Held back as a
// draft, the call ends the turn: the server interrupts it once the
// denial is in the conversation, drops the model's words after it and
// ends the turn with its own text of the draft and an ordinary done.
// Decided otherwise, the text comes out.
func TestDraftEndsTheTurn(t *testing.T) {
	t.Parallel()
	const input = `{"file_path":"/vault/post.md","text":"the shown words"}`
	// approved counts the calls the policy was told the person approved.
	var approved atomic.Int32
	setup := func(t *testing.T) (*relay.Registry, *relay.Session, *relaytest.CLI, *atomic.Int32) {
		sessions, fakes := relaytest.NewRegistry(t, relay.RegistryConfig{})
		fakes.Policy = &relay.AskPolicy{
			Timeout:       time.Minute,
			Ask:           func(tool string, _ json.RawMessage) bool { return tool == "Write" },
			ConfirmInChat: func(tool string) bool { return tool == "Write" },
			Describe:      func(string, json.RawMessage) string { return "the note" },
			Approved: func(tool string, in json.RawMessage) {
				if tool == "Write" && string(in) == input {
					approved.Add(1)
				}
			},
		}
		chat, err := sessions.GetOrCreate("", "sebastian")
		if err != nil {
			t.Fatal(err)
		}
		if err := sessions.Send(context.Background(), chat, "post it"); err != nil {
			t.Fatal(err)
		}
		cli := fakes.CLI(chat.ID)
		var interrupts atomic.Int32
		cli.InterruptFunc = func(context.Context) error {
			interrupts.Add(1)
			return nil
		}
		return sessions, chat, cli, &interrupts
	}
	// interrupted ends the turn as the CLI does after an interrupt: an
	// error result.
	interrupted := func(t *testing.T, cli *relaytest.CLI) {
		result := cliLine(t, map[string]any{"type": "result", "subtype": "error_during_execution", "is_error": true})
		cli.Sink.Publish(supervisor.Event{Kind: supervisor.EventTurnEnd, Msg: result.Msg, Interrupted: true, Time: time.Now()})
	}
	call := func(t *testing.T, cli *relaytest.CLI) supervisor.PermissionResult {
		t.Helper()
		res, err := cli.CanUseTool(context.Background(), &supervisor.ControlRequest{Subtype: "can_use_tool",
			ToolName: "Write", ToolUseID: "toolu_1", Input: json.RawMessage(input)})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}

	// Sequential: approved is shared.
	t.Run("a draft", func(t *testing.T) {
		_, chat, cli, interrupts := setup(t)
		cli.Sink.Publish(modelSays(t, "msg_1", map[string]any{"type": "text", "text": "Here it is."}))
		cli.Sink.Publish(modelSays(t, "msg_1", map[string]any{"type": "tool_use", "id": "toolu_1", "name": "Write", "input": json.RawMessage(input)}))
		cli.Sink.Publish(modelSays(t, "msg_1", map[string]any{"type": "text", "text": "Shall I fix the typo?"}))
		res := call(t, cli)
		if res.Allow || res.Interrupt || !strings.Contains(res.Message, "The server has shown the person") {
			t.Fatalf("the held-back call: %+v", res)
		}
		// Nothing more runs in the turn, not even a question; while
		// ShowsDraft, the vault guard's hook denies every tool (assembly's
		// Launch asks it).
		if !chat.ShowsDraft() {
			t.Fatal("the session does not say it shows a draft")
		}
		if res, _ := cli.CanUseTool(context.Background(), &supervisor.ControlRequest{Subtype: "can_use_tool",
			ToolName: "AskUserQuestion", Input: json.RawMessage(`{"questions":[{"question":"Fix it?"}]}`)}); res.Allow {
			t.Fatalf("a question after the draft: %+v", res)
		}
		if interrupts.Load() != 0 {
			t.Fatal("interrupted before the denial was in the conversation")
		}
		cli.Sink.Publish(toolResultOf(t, "toolu_1", res.Message))
		for deadline := time.Now().Add(30 * time.Second); interrupts.Load() == 0; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the turn was not interrupted")
			}
		}
		// The model's next words race the interrupt.
		cli.Sink.Publish(modelSays(t, "msg_2", map[string]any{"type": "text", "text": "Do you want me to fix welcome.md?"}))
		interrupted(t, cli)
		text, end := turnOutcome(t, chat)
		if chat.ShowsDraft() {
			t.Fatal("the session still shows a draft after its turn ended")
		}
		want := "Here it is.\n\nNothing is published yet. This is the note, word for word:\n\nthe shown words\n\n" +
			`Reply "yes" to publish it exactly as shown; any other reply cancels it.`
		if text != want || end != "done:success" {
			t.Fatalf("the turn showed %q and ended %s", text, end)
		}
		if n := interrupts.Load(); n != 1 {
			t.Fatalf("%d interrupts", n)
		}
		if approved.Load() != 0 {
			t.Fatal("a draft counted as approved")
		}
		hist := chat.History()
		if last := hist[len(hist)-1]; last.Role != "assistant" || last.Content != want {
			t.Fatalf("history: %+v", hist)
		}
	})

	t.Run("not a draft", func(t *testing.T) {
		_, chat, cli, interrupts := setup(t)
		defer chat.AttachInteractive()()
		cli.Sink.Publish(modelSays(t, "msg_1", map[string]any{"type": "tool_use", "id": "toolu_1", "name": "Write", "input": json.RawMessage(input)}))
		cli.Sink.Publish(modelSays(t, "msg_1", map[string]any{"type": "text", "text": "Written after the call."}))
		if text, _ := shownSoFar(chat); text != "" {
			t.Fatalf("text after an undecided call came out: %q", text)
		}
		allowed := make(chan bool, 1)
		go func() { allowed <- call(t, cli).Allow }()
		var id string
		for deadline := time.Now().Add(30 * time.Second); id == ""; time.Sleep(5 * time.Millisecond) {
			for _, ev := range chat.PendingEvents() {
				var p struct {
					RequestID string `json:"request_id"`
				}
				_ = json.Unmarshal(ev.Line, &p)
				id = p.RequestID
			}
			if time.Now().After(deadline) {
				t.Fatal("the prompt never showed")
			}
		}
		if err := chat.Answer("permission", id, relay.Answer{Allow: true}); err != nil || !<-allowed {
			t.Fatalf("allow: %v", err)
		}
		if approved.Load() != 1 {
			t.Fatal("the policy was not told of the approval")
		}
		cli.Sink.Publish(toolResultOf(t, "toolu_1", "written"))
		cli.Reply("")
		text, end := turnOutcome(t, chat)
		if text != "Written after the call." || end != "done:success" || interrupts.Load() != 0 {
			t.Fatalf("the turn showed %q, ended %s, %d interrupts", text, end, interrupts.Load())
		}
	})
}
