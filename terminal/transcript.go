package terminal

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/majorhq/major/attachments"
)

// The turns typed in a terminal reach the chat afterwards: when the
// terminal ends, what the CLI's transcript of the conversation holds after
// the last entry the app knew is read back as the person's messages and
// the assistant's answers (text only, as the compat history has them).

// Bounds on what a terminal's transcript gives the chat: the sandbox
// writes the file, so nothing in it may grow the server's memory.
const (
	maxTranscriptLine = 8 << 20
	maxTranscript     = 256 << 20
	maxTurnMessages   = 200
	maxTurnText       = 32 << 10
)

// errAfterNotFound: the transcript does not hold the entry the app knew
// last, so which entries are the terminal's is not known.
var errAfterNotFound = errors.New("the app's last entry is not in the transcript")

// entryID is the form of an entry's id the CLI writes (a UUID), loosely:
// the newest one is kept with the chat and sent with its next messages,
// so an entry with any other id (a megabyte, a line break) is not taken
// as the CLI's.
var entryID = regexp.MustCompile(`^[0-9A-Za-z-]{1,64}$`)

// transcriptEntry is the part of a transcript line the chat needs.
type transcriptEntry struct {
	Type        string `json:"type"`
	UUID        string `json:"uuid"`
	IsMeta      bool   `json:"isMeta"`
	IsSidechain bool   `json:"isSidechain"`
	Message     struct {
		Content json.RawMessage `json:"content"`
	} `json:"message"`
}

// contentBlock is one block of a message's content.
type contentBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// readTurns reads a CLI transcript from r: the messages after the entry
// with id after ("": all of them), as user and assistant messages (an
// answer's text parts joined), and the id of the last assistant entry
// read (the conversation's newest, for the app's next message).
func readTurns(r io.Reader, after string) (msgs []attachments.HistoryEntry, last string, err error) {
	sc := bufio.NewScanner(io.LimitReader(r, maxTranscript))
	sc.Buffer(make([]byte, 0, 64<<10), maxTranscriptLine)
	found := after == ""
	answer := -1 // index of the assistant message being read, in msgs
	for sc.Scan() {
		var e transcriptEntry
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue
		}
		if !found {
			found = e.UUID == after
			continue
		}
		if e.IsSidechain || e.IsMeta || !entryID.MatchString(e.UUID) {
			continue
		}
		switch e.Type {
		case "user":
			text, ok := personText(e.Message.Content)
			if !ok {
				continue
			}
			answer = -1
			msgs = append(msgs, attachments.HistoryEntry{Role: "user", Content: text})
		case "assistant":
			last = e.UUID
			text := assistantText(e.Message.Content)
			if text == "" {
				continue
			}
			if answer < 0 {
				msgs = append(msgs, attachments.HistoryEntry{Role: "assistant"})
				answer = len(msgs) - 1
			}
			if msgs[answer].Content != "" {
				text = "\n\n" + text
			}
			msgs[answer].Content = cut(msgs[answer].Content + text)
		}
		if len(msgs) > maxTurnMessages {
			msgs = msgs[len(msgs)-maxTurnMessages:]
			answer = -1
		}
	}
	if err := sc.Err(); err != nil {
		return nil, "", err
	}
	if !found {
		return nil, "", errAfterNotFound
	}
	return msgs, last, nil
}

// personText is what the person typed in a user entry; false for entries
// that are not their words: tool results, the terminal's slash commands
// and their output.
func personText(content json.RawMessage) (string, bool) {
	var text string
	if json.Unmarshal(content, &text) != nil {
		var blocks []contentBlock
		if json.Unmarshal(content, &blocks) != nil {
			return "", false
		}
		var parts []string
		for _, b := range blocks {
			if b.Type != "text" {
				return "", false
			}
			parts = append(parts, b.Text)
		}
		text = strings.Join(parts, "\n")
	}
	text = strings.TrimSpace(text)
	if text == "" || strings.HasPrefix(text, "<command-") || strings.HasPrefix(text, "<local-command-") {
		return "", false
	}
	return cut(text), true
}

// assistantText is the text of an assistant entry's blocks.
func assistantText(content json.RawMessage) string {
	var blocks []contentBlock
	if json.Unmarshal(content, &blocks) != nil {
		return ""
	}
	var parts []string
	for _, b := range blocks {
		if b.Type == "text" && strings.TrimSpace(b.Text) != "" {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n\n")
}

// cut bounds a message's text at maxTurnText bytes, on a character's
// boundary.
func cut(text string) string {
	if len(text) <= maxTurnText {
		return text
	}
	n := maxTurnText
	for n > 0 && !utf8.RuneStart(text[n]) {
		n--
	}
	return text[:n] + "…"
}
