package main

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// The machine's Claude Code managed settings hold for the sandboxed CLIs:
// with disableSideloadFlags set, the CLI refuses to start a chat of petra,
// whose configuration gives her a skill (a plugin), and she reads one
// sentence of kind config; the log names the managed setting, /readyz
// reports it without naming her, and sebastian, who brings nothing of his
// own, chats as before.
func TestManagedSettingsRefuseChatsThatBringTheirOwn(t *testing.T) {
	t.Parallel()
	managed, conf := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(managed, "managed-settings.json"), `{"disableSideloadFlags": true}`)
	writeConfig(t, conf, map[string]string{
		"persons/petra/skills/greet/SKILL.md": "---\nname: greet\ndescription: GREET-SKILL greets the person\n---\nSay GREET-BODY.\n",
	})
	s := start(t, "--config-dir", conf, "--claude-managed-settings", managed)

	req, _ := http.NewRequest("POST", s.url+"/api/claude/chat-stream", strings.NewReader(`{"message":"hello"}`))
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("X-Notes-Person", "petra")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(readAll(t, resp)), "\n")
	var last struct{ Type, Message string }
	_ = json.Unmarshal([]byte(lines[len(lines)-1]), &last)
	const sentence = "This chat cannot start because the Claude Code policy on the server's machine forbids the MCP servers or skills configured for you; please tell whoever runs this server."
	if last.Type != "error" || last.Message != sentence {
		t.Fatalf("petra's chat ended with %s, want the error %q", lines[len(lines)-1], sentence)
	}
	if logs := s.logs.String(); !strings.Contains(logs, `"managed_setting":"disableSideloadFlags"`) {
		t.Errorf("the log does not name the managed setting:\n%s", logs)
	}
	ready := readAll(t, s.req(t, "GET", "/readyz", ""))
	var out map[string]any
	_ = json.Unmarshal([]byte(ready), &out)
	why, _ := out["start_refused"].(string)
	if out["status"] != "ready" || !strings.Contains(why, "disableSideloadFlags") || strings.Contains(ready, "petra") {
		t.Errorf("readyz: %s", ready)
	}
	if got := s.chatAs(t, "sebastian", "[[say still here]]"); got != "still here" {
		t.Errorf("sebastian's chat: %q", got)
	}
}
