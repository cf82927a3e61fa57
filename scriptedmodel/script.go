package scriptedmodel

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Script is the default Responder. The person's last message picks the reply
// through a directive written as [[name args]]:
//
//	[[say TEXT]]            answer TEXT
//	[[tool NAME {json}]]    call tool NAME with that input
//	[[ask]] / [[ask-multi]] call AskUserQuestion (single / multi-select)
//	[[slow N MS]]           stream N "tick " deltas, MS milliseconds apart
//	[[big N]]               answer N bytes of text
//	[[recall]]              list every message the person sent, in order
//	[[blocks]]              describe the blocks of the person's last message
//	                        (see DescribeBlocks)
//	[[status CODE]]         fail with HTTP status CODE (401, 529, 500, ...)
//	[[status 429 N]]        rate limited, with retry-after N seconds
//	[[drop]] / [[malformed]] break the stream mid-message
//	[[hang]]                start the message, then send nothing
//	[[cost N]]              answer, reporting N input tokens of usage
//	[[usage {json}]]        answer, reporting this usage (cache tokens,
//	                        server_tool_use, ...; see Reply.Usage)
//	[[steps N MS]]          a turn of N tool calls (Glob), each request
//	                        answered after MS milliseconds, then "STEPS
//	                        DONE; heard: ..." with every text the person
//	                        sent since the directive, so a message handed
//	                        to the running turn shows
//
// A message with no directive gets a short offline answer, and a request
// that carries tool results is answered "RESULT<<...>>" with their text, so
// a test can see what the CLI handed back to the model.
func Script(req Request) Reply {
	if r, ok := steps(req); ok {
		return r
	}
	text := req.LastUserText()
	// The CLI may put a tool result and the person's next message in one
	// user message (after an interrupted tool call): typed text wins.
	if results := req.ToolResults(); len(results) > 0 && text == "" {
		var parts []string
		for _, b := range results {
			parts = append(parts, b.ResultText())
		}
		return Text("RESULT<<" + strings.Join(parts, " | ") + ">>")
	}
	name, args, ok := directive(text)
	if !ok {
		return Text(offlineAnswer(text))
	}
	switch name {
	case "say":
		return Text(args)
	case "tool":
		tool, input, _ := strings.Cut(args, " ")
		var v any = map[string]any{}
		if strings.TrimSpace(input) != "" {
			if err := json.Unmarshal([]byte(input), &v); err != nil {
				return Text("script error: tool input is not JSON: " + err.Error())
			}
		}
		return ToolUse(tool, v)
	case "ask", "ask-multi":
		return ToolUse("AskUserQuestion", AskInput(name == "ask-multi"))
	case "slow":
		n, ms := 20, 200
		f := strings.Fields(args)
		if len(f) > 0 {
			n, _ = strconv.Atoi(f[0])
		}
		if len(f) > 1 {
			ms, _ = strconv.Atoi(f[1])
		}
		return Reply{Blocks: []ReplyBlock{{Text: strings.Repeat("tick ", max(n, 1))}}, ChunkSize: len("tick "), Delay: time.Duration(ms) * time.Millisecond}
	case "big":
		n, _ := strconv.Atoi(strings.TrimSpace(args))
		return Reply{Blocks: []ReplyBlock{{Text: BigText(n)}}, ChunkSize: 64 << 10}
	case "recall":
		return Text("HISTORY: " + strings.Join(req.UserTexts(), " | "))
	case "blocks":
		return Text("BLOCKS: " + DescribeBlocks(req.LastUser().Content))
	case "status":
		f := strings.Fields(args)
		code := 500
		if len(f) > 0 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				code = n
			}
		}
		retry := 0
		if len(f) > 1 {
			retry, _ = strconv.Atoi(f[1])
		}
		return Reply{Status: code, RetryAfter: retry}
	case "drop":
		return Reply{Blocks: []ReplyBlock{{Text: "partial answer that never ends"}}, Drop: true}
	case "hang":
		return Reply{Hang: true}
	case "cost":
		n, _ := strconv.Atoi(strings.TrimSpace(args))
		return Reply{Blocks: []ReplyBlock{{Text: "an expensive answer"}}, InputTokens: n}
	case "usage":
		var u map[string]any
		if err := json.Unmarshal([]byte(args), &u); err != nil {
			return Text("script error: usage is not a JSON object: " + err.Error())
		}
		return Reply{Blocks: []ReplyBlock{{Text: "an answer with usage"}}, Usage: u}
	case "steps":
		_, ms := stepsArgs(args)
		return step(1, ms)
	case "malformed":
		return Reply{Blocks: []ReplyBlock{{Text: "partial answer"}}, Malformed: true}
	}
	return Text(fmt.Sprintf("script error: unknown directive %q", name))
}

// DescribeBlocks says what each content block is, joined by " | ": an
// image or document as its type, media type and decoded size (and a
// document's title), a text block as "text" and its first 200
// characters on one line. The CLI's own notes are left out.
func DescribeBlocks(blocks []Block) string {
	var parts []string
	for _, b := range blocks {
		switch {
		case b.Type == "text" && cliNote(b.Text):
		case b.Type == "text":
			t := strings.Join(strings.Fields(b.Text), " ")
			if r := []rune(t); len(r) > 200 {
				t = string(r[:200])
			}
			parts = append(parts, "text "+t)
		case b.Source != nil:
			n, err := base64.StdEncoding.DecodeString(b.Source.Data)
			desc := fmt.Sprintf("%s %s %d", b.Type, b.Source.MediaType, len(n))
			if err != nil {
				desc += " (not base64)"
			}
			if b.Title != "" {
				desc += fmt.Sprintf(" %q", b.Title)
			}
			parts = append(parts, desc)
		default:
			parts = append(parts, b.Type)
		}
	}
	return strings.Join(parts, " | ")
}

// directive finds the first [[name args]] in text.
func directive(text string) (name, args string, ok bool) {
	start := strings.Index(text, "[[")
	if start < 0 {
		return "", "", false
	}
	end := strings.LastIndex(text, "]]")
	if end < start {
		return "", "", false
	}
	body := strings.TrimSpace(text[start+2 : end])
	name, args, _ = strings.Cut(body, " ")
	return name, strings.TrimSpace(args), name != ""
}

// steps answers a request in the middle of a [[steps N MS]] turn: the
// turn's opening message (the last user message the person typed, not a
// tool result) holds the directive, and the request carries a tool
// result. Messages handed to the running turn come in beside the tool
// results, so they do not open a turn.
func steps(req Request) (Reply, bool) {
	if len(req.ToolResults()) == 0 {
		return Reply{}, false
	}
	open := -1
	for i, m := range req.Messages {
		if m.Role != "user" {
			continue
		}
		typed, results := false, false
		for _, b := range m.Content {
			typed = typed || (b.Type == "text" && !strings.HasPrefix(b.Text, "<system-reminder>"))
			results = results || b.Type == "tool_result"
		}
		if typed && !results {
			open = i
		}
	}
	if open < 0 {
		return Reply{}, false
	}
	var args string
	for _, b := range req.Messages[open].Content {
		if name, a, ok := directive(b.Text); ok && name == "steps" {
			args = a
		}
	}
	if args == "" {
		return Reply{}, false
	}
	n, ms := stepsArgs(args)
	done := 0
	var heard []string
	for _, m := range req.Messages[open+1:] {
		for _, b := range m.Content {
			switch {
			case m.Role == "assistant" && b.Type == "tool_use":
				done++
			case m.Role == "user" && b.Type == "text" && !strings.HasPrefix(b.Text, "<system-reminder>"):
				heard = append(heard, b.Text)
			}
		}
	}
	if done < n {
		return step(done+1, ms), true
	}
	return Text("STEPS DONE; heard: " + strings.Join(heard, " | ")), true
}

// stepsArgs reads "N MS" (default 4 steps, 500 ms each).
func stepsArgs(args string) (n, ms int) {
	n, ms = 4, 500
	f := strings.Fields(args)
	if len(f) > 0 {
		n, _ = strconv.Atoi(f[0])
	}
	if len(f) > 1 {
		ms, _ = strconv.Atoi(f[1])
	}
	return max(n, 1), ms
}

// step is the i-th tool call of a [[steps]] turn, answered after ms.
func step(i, ms int) Reply {
	r := ToolUse("Glob", map[string]any{"pattern": fmt.Sprintf("step-%d-*", i)})
	r.Delay = time.Duration(ms) * time.Millisecond
	return r
}

// AskInput is the AskUserQuestion input that [[ask]] and [[ask-multi]] send.
func AskInput(multi bool) map[string]any {
	if multi {
		return map[string]any{"questions": []any{map[string]any{
			"question": "Which toppings?", "header": "Toppings", "multiSelect": true,
			"options": []any{
				map[string]any{"label": "Cheese", "description": "melted"},
				map[string]any{"label": "Olives", "description": "black"},
				map[string]any{"label": "Basil", "description": "fresh"},
			},
		}}}
	}
	return map[string]any{"questions": []any{map[string]any{
		"question": "Which color?", "header": "Color", "multiSelect": false,
		"options": []any{
			map[string]any{"label": "Red", "description": "warm"},
			map[string]any{"label": "Blue", "description": "cool"},
		},
	}}}
}

// BigText returns n bytes of recognisable text: numbered lines, so a
// truncation or a reordering shows.
func BigText(n int) string {
	var sb strings.Builder
	sb.Grow(n)
	for i := 0; sb.Len() < n; i++ {
		fmt.Fprintf(&sb, "line %08d of a big answer\n", i)
	}
	return sb.String()[:n]
}

func offlineAnswer(text string) string {
	if strings.TrimSpace(text) == "" {
		return "This is the offline scripted model. Ask me anything; I only echo."
	}
	return "This is the offline scripted model (no Anthropic credential is set). You said: " + text
}
