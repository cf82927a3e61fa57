package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/majorhq/major/scriptedmodel"
)

// inPieces is the directive script with every text the model writes
// streamed in deltas of a few bytes, as the real API streams tokens: a
// path the model repeats reaches the server in pieces.
func inPieces(req scriptedmodel.Request) scriptedmodel.Reply {
	r := scriptedmodel.Script(req)
	if r.Status == 0 {
		r.ChunkSize = 5
	}
	return r
}

// TestClientsNeverSeeServerPaths runs a session of a person with a
// configured MCP server and skill through the real CLI, whose turns name
// the server's folders every way they can (the CLI's init message, a
// tool's result, a denied path outside the person's folder, a skill's
// folder in the state directory, the model repeating a path in small
// deltas) and whose model calls fail (500, 401). Every line of the events
// stream, the compat stream, the rich and the compat history:
//   - names none of the server's folders (vault root, state and
//     configuration directories, the CLI's home, temp folder, working
//     directory, the CLI's install folder), and a path in the person's
//     folder only relative to it;
//   - carries none of the model API's error text, nor the gateway's
//     address;
//
// and the log keeps that error text, with the session's id.
func TestClientsNeverSeeServerPaths(t *testing.T) {
	t.Parallel()
	conf := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	probe, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{"probe": map[string]any{
		"command": self, "args": []string{"-test.run=^$"}, "env": map[string]string{probeEnv: "1"},
	}}})
	writeConfig(t, conf, map[string]string{
		"persons/sebastian/mcp.json":              string(probe),
		"persons/sebastian/config.json":           `{"tools":{"allow":["mcp__probe"]}}`,
		"persons/sebastian/skills/greet/SKILL.md": "---\nname: greet\ndescription: greets the person\n---\nSay GREET-BODY to the person.\n",
	})
	s := startModel(t, inPieces, "--config-dir", conf)
	// One retry of a failed model call, not ten.
	s.stop(t)
	s = launch(t, s.env, s.li, s.state, s.args, append(s.environ, "CLAUDE_CODE_MAX_RETRIES=1"))
	vault := s.env.Vault("sebastian")
	if err := os.MkdirAll(filepath.Join(vault, "notes"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(vault, "notes", "x.md"), "a note")
	wd, _ := os.Getwd()
	model, _ := url.Parse(s.env.ModelURL)
	// What must never reach a client, and why.
	secrets := map[string]string{
		s.env.VaultRoot:            "the vault root",
		s.state:                    "the state directory",
		conf:                       "the configuration directory",
		s.env.Home:                 "the CLI's home",
		os.TempDir() + "/":         "the temp folder",
		wd:                         "the working directory",
		filepath.Dir(s.env.Binary): "the CLI's install folder",
		"Internal Server Error":    "the model API's error",
		"API Error":                "the CLI's text of a model API error",
		"Invalid API key":          "the CLI's text of a refused key",
		"Not logged in":            "the CLI's text of a refused token",
		model.Host:                 "the model's address",
		"/.claude/projects/":       "the CLI's transcripts",
		"session-config/skills":    "the skill's folder in the state directory",
		"cc-socks":                 "the CLI's socket in the temp folder",
	}
	check := func(t *testing.T, what, line string) {
		t.Helper()
		for s, why := range secrets {
			if strings.Contains(line, s) {
				t.Errorf("%s shows %s (%q):\n%s", what, why, s, line)
			}
		}
	}

	id := s.newSessionAs(t, "sebastian")
	for _, msg := range []string{
		`[[tool Read {"file_path":"notes/x.md"}]]`,
		`[[tool Read {"file_path":"../petra/x.md"}]]`,
		`[[tool mcp__probe__whereami {}]]`,
		`[[tool Skill {"skill":"major:greet"}]]`,
		`[[status 500]]`,
		`[[status 401]]`,
	} {
		body, _ := json.Marshal(map[string]string{"message": msg, "session_id": id})
		check(t, "the chat answer to "+msg, readAll(t, s.req(t, "POST", "/api/claude/chat", string(body))))
	}
	// The model repeats server paths (it read them in a tool result)
	// and one of the person's, in deltas of a few bytes.
	say := fmt.Sprintf("[[say the skill is in %s and the note is %s, the socket %s]]",
		filepath.Join(s.state, "session-config", "skills"), filepath.Join(vault, "notes", "x.md"), filepath.Join(os.TempDir(), "cc-socks", "1.sock"))
	body, _ := json.Marshal(map[string]string{"message": say, "session_id": id})
	var said strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(readAll(t, s.req(t, "POST", "/api/claude/chat-stream", string(body)))), "\n") {
		check(t, "the compat stream", line)
		var ev struct{ Type, Delta string }
		if json.Unmarshal([]byte(line), &ev) == nil && ev.Type == "text" {
			said.WriteString(ev.Delta)
		}
	}
	if want := "the skill is in " + "[server path]" + " and the note is notes/x.md, the socket [server path]"; said.String() != want {
		t.Errorf("the model's text streamed as %q, want %q", said.String(), want)
	}

	events := s.req(t, "GET", "/api/claude/sessions/"+id+"/events?after=0", "")
	sc := bufio.NewScanner(events.Body)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	// all is every line; texts and deltas the text events and the CLI's
	// streamed deltas, each joined: what a client that joins them reads.
	var all, texts, deltas strings.Builder
	for turns := 0; turns < 7 && sc.Scan(); {
		line := sc.Text()
		check(t, "the events stream", line)
		all.WriteString(line + "\n")
		var ev struct {
			Type, Delta string
			Event       struct {
				Type  string
				Event struct{ Delta struct{ Type, Text string } }
			}
		}
		_ = json.Unmarshal([]byte(line), &ev)
		switch {
		case ev.Type == "done" || ev.Type == "error":
			turns++
		case ev.Type == "text":
			texts.WriteString(ev.Delta)
		case ev.Event.Type == "stream_event" && ev.Event.Event.Delta.Type == "text_delta":
			deltas.WriteString(ev.Event.Event.Delta.Text)
		}
	}
	events.Body.Close()
	check(t, "the text events, joined", texts.String())
	check(t, "the CLI's text deltas, joined", deltas.String())
	check(t, "the rich history", readAll(t, s.req(t, "GET", "/api/claude/sessions/"+id+"/messages", "")))
	check(t, "the compat history", readAll(t, s.req(t, "GET", "/api/claude/history?session_id="+id, "")))

	// Not by leaving things out: the events say what happened, paths in
	// the person's folder relative to it.
	stream := all.String()
	for _, want := range []string{
		`"filePath":"notes/x.md"`,          // the Read tool's result in the cli event
		`"cwd":"."`,                        // the CLI's init message
		`"path":"[server path]"`,           // the skill's plugin folder there
		`PROBE-CWD / PWD /`,                // the MCP server ran in / (never the person's folder)
		`Access denied: \"[server path]\"`, // the guard's denial of another person's path
		`"withheld":true`,                  // the CLI's messages about the failed calls
		`"result":"The model's API answered with an error (HTTP 500); please try again."`,
		`"text":"The assistant cannot use the model: the API key is missing or invalid. Please tell whoever runs this server."`,
	} {
		if !strings.Contains(stream, want) {
			t.Errorf("the events stream lacks %s", want)
		}
	}
	// The log has what the clients do not, with the session.
	var logged []string
	for _, line := range strings.Split(s.logs.String(), "\n") {
		if strings.Contains(line, id) && (strings.Contains(line, "Internal Server Error") || strings.Contains(line, "Not logged in")) {
			logged = append(logged, line)
		}
	}
	if !strings.Contains(strings.Join(logged, "\n"), "Internal Server Error") || !strings.Contains(strings.Join(logged, "\n"), "Not logged in") {
		t.Errorf("the log lacks the model API's errors of session %s:\n%s", id, strings.Join(logged, "\n"))
	}
}
