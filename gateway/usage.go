package gateway

import (
	"bytes"
	"encoding/json"
	"io"
)

// Usage is what one model request used, as the API reported it.
type Usage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	// CacheCreation1hInputTokens is the part of the cache writes that
	// lives an hour (priced higher than the five-minute ones).
	CacheCreation1hInputTokens int64 `json:"cache_creation_1h_input_tokens,omitempty"`
	CacheReadInputTokens       int64 `json:"cache_read_input_tokens"`
	WebSearchRequests          int64 `json:"web_search_requests,omitempty"`
	// InferenceGeo and Speed change the price ("us": 1.1 times the token
	// cost; "fast": fast-mode prices).
	InferenceGeo string `json:"inference_geo,omitempty"`
	Speed        string `json:"speed,omitempty"`
}

// apiUsage is the API's usage object; a field it leaves out is nil.
type apiUsage struct {
	InputTokens              *int64 `json:"input_tokens"`
	OutputTokens             *int64 `json:"output_tokens"`
	CacheCreationInputTokens *int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     *int64 `json:"cache_read_input_tokens"`
	CacheCreation            *struct {
		OneHour  *int64 `json:"ephemeral_1h_input_tokens"`
		FiveMins *int64 `json:"ephemeral_5m_input_tokens"`
	} `json:"cache_creation"`
	ServerToolUse *struct {
		WebSearchRequests *int64 `json:"web_search_requests"`
	} `json:"server_tool_use"`
	InferenceGeo *string `json:"inference_geo"`
	Speed        *string `json:"speed"`
}

// merge folds a later usage report (message_delta's) into u the way the
// CLI does: input and cache counts only when positive, the others
// whenever present.
func (u *Usage) merge(a *apiUsage) {
	if a == nil {
		return
	}
	positive := func(dst *int64, v *int64) bool {
		if v != nil && *v > 0 {
			*dst = *v
			return true
		}
		return false
	}
	positive(&u.InputTokens, a.InputTokens)
	positive(&u.CacheReadInputTokens, a.CacheReadInputTokens)
	var split int64
	if c := a.CacheCreation; c != nil {
		split = deref(c.OneHour) + deref(c.FiveMins)
		if split > 0 && c.OneHour != nil {
			u.CacheCreation1hInputTokens = *c.OneHour
		}
	}
	if !positive(&u.CacheCreationInputTokens, a.CacheCreationInputTokens) && split > 0 {
		u.CacheCreationInputTokens = split
	}
	if a.OutputTokens != nil {
		u.OutputTokens = *a.OutputTokens
	}
	if a.ServerToolUse != nil && a.ServerToolUse.WebSearchRequests != nil {
		u.WebSearchRequests = *a.ServerToolUse.WebSearchRequests
	}
	if a.InferenceGeo != nil {
		u.InferenceGeo = *a.InferenceGeo
	}
	if a.Speed != nil {
		u.Speed = *a.Speed
	}
}

func deref(v *int64) int64 {
	if v == nil {
		return 0
	}
	return *v
}

// maxEventData bounds what the meter keeps of a response: an event's data
// (the events it reads are small; a longer one is a content delta it
// skips), and a member it reads of a whole JSON answer (usage, model).
const maxEventData = 256 << 10

// meter reads a model response as it passes through, for its usage and
// the model that served it: a stream's message_start (the model, input and
// cache tokens), every message_delta (output tokens and server tools) and
// its end, or the usage and model members of a whole JSON message, read
// as they pass (an answer of any length). It never holds up the bytes: it
// sees each chunk after it was read and keeps only what it needs, bounded.
type meter struct {
	status int
	sse    bool
	usage  Usage
	model  string // as the answer named it

	eof     bool // the upstream body ended cleanly
	stopped bool // message_stop arrived
	failed  bool // an error event arrived

	// The SSE line being read, the current event's name and data.
	line     []byte
	skipLine bool
	event    string
	data     []byte
	skipData bool

	// The members of a JSON answer; made at its first byte.
	members *topMembers
}

// complete reports whether the response ended normally.
func (m *meter) complete() bool {
	if m.status == 0 || !m.eof || m.failed {
		return false
	}
	return !m.sse || m.stopped || m.status != 200
}

func (m *meter) write(p []byte) {
	if !m.sse {
		if m.members == nil {
			m.members = newTopMembers(maxEventData, "usage", "model")
		}
		m.members.write(p)
		return
	}
	for len(p) > 0 {
		chunk := p
		i := bytes.IndexByte(p, '\n')
		if i >= 0 {
			chunk, p = p[:i], p[i+1:]
		} else {
			p = nil
		}
		if len(m.line) == 0 && !m.skipLine && len(chunk) > 0 && chunk[0] == 'd' && m.event != "" && !wanted(m.event) {
			// A data line of an event the meter does not read (a
			// content delta, mostly): not even copied.
			m.skipLine = true
		}
		if !m.skipLine {
			if len(m.line)+len(chunk) > maxEventData {
				m.skipLine, m.line = true, m.line[:0]
			} else {
				m.line = append(m.line, chunk...)
			}
		}
		if i < 0 {
			return
		}
		if !m.skipLine {
			m.handleLine(bytes.TrimSuffix(m.line, []byte{'\r'}))
		} else if m.event == "" {
			// An overlong data line of an event without a name: its
			// data is lost, so the event must not be read.
			m.skipData = true
		}
		m.line, m.skipLine = m.line[:0], false
	}
}

// wanted reports whether the meter reads an event of this name.
func wanted(event string) bool {
	switch event {
	case "message_start", "message_delta", "message_stop", "error":
		return true
	}
	return false
}

func (m *meter) handleLine(line []byte) {
	if len(line) == 0 {
		if !m.skipData && (len(m.data) > 0 || m.event != "") {
			m.dispatch()
		}
		m.event, m.data, m.skipData = "", m.data[:0], false
		return
	}
	field, value, _ := bytes.Cut(line, []byte{':'})
	value = bytes.TrimPrefix(value, []byte{' '})
	switch string(field) {
	case "event":
		m.event = string(value)
	case "data":
		if len(m.data)+len(value)+1 > maxEventData {
			m.skipData = true
			return
		}
		if len(m.data) > 0 {
			m.data = append(m.data, '\n')
		}
		m.data = append(m.data, value...)
	}
}

// streamEvent is the part of a stream event the meter reads.
type streamEvent struct {
	Type    string `json:"type"`
	Message *struct {
		Model string    `json:"model"`
		Usage *apiUsage `json:"usage"`
	} `json:"message"`
	Usage *apiUsage `json:"usage"`
}

func (m *meter) dispatch() {
	if m.event != "" && !wanted(m.event) {
		return
	}
	var ev streamEvent
	if err := json.Unmarshal(m.data, &ev); err != nil {
		return
	}
	switch ev.Type {
	case "message_start":
		if ev.Message != nil {
			m.usage, m.model = Usage{}, ev.Message.Model
			m.usage.merge(ev.Message.Usage)
		}
	case "message_delta":
		m.usage.merge(ev.Usage)
	case "message_stop":
		m.stopped = true
	case "error":
		m.failed = true
	}
}

// finish reads the usage and model of a whole JSON answer once its body
// ended.
func (m *meter) finish() {
	if m.sse || !m.eof || m.members == nil {
		return
	}
	if raw := m.members.value("usage"); raw != nil {
		var u *apiUsage
		if json.Unmarshal(raw, &u) == nil {
			m.usage = Usage{}
			m.usage.merge(u)
		}
	}
	if raw := m.members.value("model"); raw != nil {
		_ = json.Unmarshal(raw, &m.model)
	}
	m.members = nil
}

// meteredBody is a response body that shows the meter every chunk read.
type meteredBody struct {
	io.ReadCloser
	m *meter
}

func (b *meteredBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.m.write(p[:n])
	if err == io.EOF {
		b.m.eof = true
		b.m.finish()
	}
	return n, err
}
