package clientevent

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/majorhq/major/supervisor"
)

// An upstream error's text (the model API's error body, and the CLI's
// words about it, which name the gateway's address) never reaches a
// client, in a cli event either: the CLI messages that carry it go out
// with that text replaced by the sentence the turn's error event (or the
// retry's status) says, and the text goes to the log.

// upstreamSentence is what a client reads instead of the upstream error
// text in m: for the CLI's message about a failed API call, an errored
// turn's result and a retry notice. ok is false for any other message.
// apiMsg and lastRetry are the turn's as resultFailure takes them.
func upstreamSentence(m, apiMsg, lastRetry *supervisor.Message, at time.Time) (sentence string, ok bool) {
	switch {
	case m.Type == "assistant" && m.IsAPIErrorMessage:
		status := 0
		if m.APIErrorStatus != nil {
			status = *m.APIErrorStatus
		}
		return apiFailure(status, m.APIErrorType, m.Error, lastRetry, at).message, true
	case m.Type == "result" && m.IsError && m.TerminalReason != "aborted_streaming":
		// An interrupted turn's result says nothing of an upstream error.
		return resultFailure(m, apiMsg, lastRetry, at).message, true
	case m.Type == "system" && m.Subtype == "api_retry":
		return retryStatus(m).Message, true
	}
	return "", false
}

// withhold is m's raw message with the upstream error text in it
// replaced by sentence, and the texts it replaced; raw itself if there
// was none.
func withhold(m *supervisor.Message, sentence string) (raw json.RawMessage, texts []string) {
	var fields map[string]json.RawMessage
	if json.Unmarshal(m.Raw, &fields) != nil {
		return m.Raw, nil
	}
	quoted, err := Marshal(sentence)
	if err != nil {
		return m.Raw, nil
	}
	// swap replaces the string in *v, if it is one.
	swap := func(v *json.RawMessage) {
		var s string
		if *v != nil && json.Unmarshal(*v, &s) == nil && s != "" {
			texts = append(texts, s)
			*v = quoted
		}
	}
	field := func(key string) {
		if v, ok := fields[key]; ok {
			swap(&v)
			fields[key] = v
		}
	}
	switch m.Type {
	case "assistant":
		field("api_error")
		var msg map[string]json.RawMessage
		var blocks []map[string]json.RawMessage
		if json.Unmarshal(fields["message"], &msg) == nil && json.Unmarshal(msg["content"], &blocks) == nil {
			for _, b := range blocks {
				if v, ok := b["text"]; ok {
					swap(&v)
					b["text"] = v
				}
			}
			msg["content"], _ = Marshal(blocks)
			fields["message"], _ = Marshal(msg)
		}
	case "result":
		field("result")
		field("api_error")
		var errs []string
		if json.Unmarshal(fields["errors"], &errs) == nil && len(errs) > 0 {
			texts = append(texts, errs...)
			fields["errors"] = append(append([]byte{'['}, quoted...), ']')
		}
	case "system":
		// A retry notice: its error class stays, any text goes.
		for key, v := range fields {
			var s string
			switch key {
			case "type", "subtype", "session_id", "uuid":
				continue
			}
			if json.Unmarshal(v, &s) == nil && !identifier(s) {
				swap(&v)
				fields[key] = v
			}
		}
	}
	if len(texts) == 0 {
		return m.Raw, nil
	}
	out, err := Marshal(fields)
	if err != nil {
		return m.Raw, nil
	}
	return out, texts
}

// identifier reports whether s is a name such as an error class
// ("server_error", "rate_limit"), not a text.
func identifier(s string) bool {
	if len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// cliPrefix starts the body of a cli event whose message is as the CLI
// wrote it.
const cliPrefix = `{"type":"cli","event":`

// AppendCLI appends the body of c to dst: the CLI's message goes out as
// it is, one JSON value already, since walking it again to re-encode it
// was most of a delta's cost.
func AppendCLI(dst []byte, c CLI) []byte {
	if c.Withheld {
		dst = append(dst, `{"type":"cli","withheld":true,"event":`...)
	} else {
		dst = append(dst, cliPrefix...)
	}
	return append(append(dst, c.Event...), '}')
}

// RecordedCLI is the body of a cli event read back from a session's log
// as a client may see it: a log written before upstream error text was
// withheld still holds it, and it is replaced as in a live event (a rate
// limit's sentence without the time to wait, which has passed). Other
// bodies are returned as they are.
func RecordedCLI(body []byte) []byte {
	if !bytes.HasPrefix(body, []byte(cliPrefix)) || !bytes.HasSuffix(body, []byte("}")) {
		return body
	}
	raw := body[len(cliPrefix) : len(body)-1]
	if !bytes.Contains(raw, []byte(`"is_api_error_message":true`)) && !bytes.Contains(raw, []byte(`"is_error":true`)) &&
		!bytes.Contains(raw, []byte(`"api_retry"`)) {
		return body
	}
	m, err := supervisor.DecodeMessage(raw)
	if err != nil {
		return body
	}
	sentence, ok := upstreamSentence(m, nil, nil, time.Time{})
	if !ok {
		return body
	}
	out, texts := withhold(m, sentence)
	if len(texts) == 0 {
		return body
	}
	return AppendCLI(nil, CLI{Type: "cli", Withheld: true, Event: out})
}
