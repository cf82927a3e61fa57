package clientevent

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"

	"github.com/majorhq/major/vault"
)

// Placeholder stands in, in what a client sees, for a path of the server's
// own.
const Placeholder = "[server path]"

// maxHold bounds the text a Redactor holds back for the next delta: no
// path the server hides is longer.
const maxHold = 4096

// ServerPaths are the folders of the server that no client may see: the
// CLI names them in its events (its working folder, plugin and MCP
// configuration files, its transcripts), tools name them in their
// results, and the model repeats them.
type ServerPaths struct {
	// VaultRoot holds one folder per person. A path in the person's own
	// folder is shown relative to it (notes/x.md; the folder itself is
	// "."); any other path under VaultRoot is hidden.
	VaultRoot string
	// Hidden are the server's own folders: its state and configuration
	// directories, the CLI's install folder, the working directory, the
	// temp folders. A path under one of them is replaced by Placeholder.
	Hidden []string
	// Home is the CLI's home. It is hidden too, and so is a path written
	// from it ("~/.claude/projects/...").
	Home string
}

// Redactor takes the server's paths out of what one person's clients
// see. It is built once per person and safe for concurrent use.
type Redactor struct {
	text []pathRoot // longest first
	json []pathRoot // the same, as they are written inside a JSON string
	// tilde: "~/..." is a path under the hidden home.
	tilde bool
}

// pathRoot is a folder whose paths a Redactor rewrites.
type pathRoot struct {
	prefix string
	// own is the person's folder: its paths are shown relative to it.
	own bool
}

// Redactor is the Redactor for person's clients; "" (or a name that is
// no person's) hides every person's folder. A folder that is not absolute, or is the file system's root,
// is left out: hiding "/" would hide every path.
func (p ServerPaths) Redactor(person string) *Redactor {
	r := &Redactor{}
	seen := map[string]bool{}
	add := func(dir string, own bool) {
		if dir == "" || !filepath.IsAbs(dir) {
			return
		}
		forms := []string{filepath.Clean(dir)}
		// The CLI names a folder as it resolved it (a symlinked /tmp, a
		// home under /private on macOS).
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			forms = append(forms, real)
		}
		for _, d := range forms {
			if d == string(filepath.Separator) || seen[d] {
				continue
			}
			seen[d] = true
			r.text = append(r.text, pathRoot{prefix: d, own: own})
		}
	}
	if p.VaultRoot != "" && vault.ValidPerson(person) && !vault.Reserved(person) {
		add(filepath.Join(p.VaultRoot, person), true)
	}
	add(p.VaultRoot, false)
	for _, d := range p.Hidden {
		add(d, false)
	}
	if p.Home != "" && filepath.IsAbs(p.Home) {
		add(p.Home, false)
		r.tilde = filepath.Clean(p.Home) != string(filepath.Separator)
	}
	// The longest first: the person's folder wins over the vault root
	// and a temp folder it lies in; a hidden folder inside the person's
	// folder wins over it.
	slices.SortStableFunc(r.text, func(a, b pathRoot) int { return len(b.prefix) - len(a.prefix) })
	r.json = make([]pathRoot, len(r.text))
	for i, rt := range r.text {
		r.json[i] = pathRoot{prefix: jsonEscape(rt.prefix), own: rt.own}
	}
	return r
}

// JSON is b, one JSON value, with the server's paths taken out of its
// strings. It is b itself when there is none, so the common case costs a
// scan for '/' and no allocation.
func (r *Redactor) JSON(b []byte) []byte {
	if r == nil || (len(r.json) == 0 && !r.tilde) {
		return b
	}
	out := redact(b, r.json, r.tilde, true)
	if out == nil {
		return b
	}
	return out
}

// Text is s with the server's paths taken out.
func (r *Redactor) Text(s string) string {
	if r == nil || (len(r.text) == 0 && !r.tilde) || !strings.Contains(s, "/") {
		return s
	}
	out := redact([]byte(s), r.text, r.tilde, false)
	if out == nil {
		return s
	}
	return string(out)
}

// Hold is how many bytes at the end of s, a text streamed in pieces, must
// wait for the next piece: a path that is, or may become, one the
// Redactor rewrites, and that the next piece may still continue.
func (r *Redactor) Hold(s string) int { return r.hold("", s) }

// hold is Hold for s following before, the end of the text that went out
// before it (whether a path starts at s[0] depends on it).
func (r *Redactor) hold(before, s string) int {
	if r == nil || (len(r.text) == 0 && !r.tilde) {
		return 0
	}
	start := len(s)
	for start > 0 && len(s)-start < maxHold && !stopsPath(s[start-1]) {
		start--
	}
	for p := start; p < len(s); p++ {
		if s[p] != '/' && s[p] != '~' || !startsPath(before, s, p) {
			continue
		}
		tail := s[p:]
		if s[p] == '~' {
			if r.tilde && (tail == "~" || tail[1] == '/') {
				return len(tail)
			}
			continue
		}
		for _, rt := range r.text {
			if strings.HasPrefix(rt.prefix, tail) || strings.HasPrefix(tail, rt.prefix) {
				return len(tail)
			}
		}
	}
	return 0
}

// startsPath is atPathStart in text for s[p], s following before.
func startsPath(before, s string, p int) bool {
	if p >= 2 {
		return atPathStart(s, p, false)
	}
	var buf [4]byte
	n := copy(buf[:], before[max(len(before)-2, 0):])
	n += copy(buf[n:], s[:p+1])
	return atPathStart(buf[:n], n-1, false)
}

// redact rewrites every path under roots (longest first) in b, and with
// tilde every "~/..." path; nil if there was none. inJSON: b is JSON, so
// a path ends at a backslash (an escape) and may follow one (\n).
func redact(b []byte, roots []pathRoot, tilde, inJSON bool) []byte {
	var out []byte
	last := 0 // b[last:] is not yet in out
	for i := 0; i < len(b); {
		j := bytes.IndexByte(b[i:], '/')
		if j < 0 {
			break
		}
		i += j
		start, end, repl := -1, 0, ""
		if tilde && i > 0 && b[i-1] == '~' && atPathStart(b, i-1, inJSON) {
			start, end, repl = i-1, pathEnd(b, i), Placeholder
		} else if atPathStart(b, i, inJSON) {
			for _, rt := range roots {
				e := i + len(rt.prefix)
				if e > len(b) || string(b[i:e]) != rt.prefix || (e < len(b) && nameByte(b[e])) {
					continue
				}
				switch {
				case !rt.own:
					start, end, repl = i, pathEnd(b, e), Placeholder
				case e+1 < len(b) && b[e] == '/' && !stopsPath(b[e+1]):
					// notes/x.md for <folder>/notes/x.md.
					start, end = i, e+1
				default:
					start, end, repl = i, e, "."
				}
				break
			}
		}
		if start < 0 {
			i++
			continue
		}
		if out == nil {
			out = make([]byte, 0, len(b))
		}
		out = append(append(out, b[last:start]...), repl...)
		last, i = end, end
	}
	if out == nil {
		return nil
	}
	return append(out, b[last:]...)
}

// atPathStart reports whether a path may start at b[i]: it does not
// continue a name or another path, except after "//" or ":/" (file:///x)
// and, in JSON, after an escape such as \n.
func atPathStart[T string | []byte](b T, i int, inJSON bool) bool {
	if i == 0 {
		return true
	}
	c := b[i-1]
	switch {
	case c == '/':
		return i >= 2 && (b[i-2] == '/' || b[i-2] == ':')
	case nameByte(c):
		return inJSON && i >= 2 && b[i-2] == '\\'
	}
	return true
}

// pathEnd is where the path that continues at b[i] ends.
func pathEnd(b []byte, i int) int {
	for i < len(b) && !stopsPath(b[i]) {
		i++
	}
	return i
}

// nameByte reports whether c can be part of a file name next to a path
// (so /vault/sebastian2 is not under /vault/sebastian).
func nameByte(c byte) bool {
	return c >= 0x80 || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '.' || c == '_' || c == '-' || c == '+' || c == '~'
}

// stopsPath reports whether c ends a path in text: white space, quotes,
// brackets, separators of lists and a backslash (a JSON escape).
func stopsPath(c byte) bool {
	if c <= ' ' || c == 0x7f {
		return true
	}
	return strings.IndexByte("\"'`\\<>|,;:()[]{}", c) >= 0
}

// jsonEscape is s as it is written inside a JSON string (by the CLI and
// by this server: no HTML escaping).
func jsonEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20:
			const hex = "0123456789abcdef"
			b.WriteString(`\u00`)
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&0xf])
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// TextHold holds back, across one session's text deltas, the end of the
// text streamed so far that may be the start of a server path, so a path
// the model streams in pieces is taken out whole: each event is redacted
// on its own. The zero value holds nothing back.
type TextHold struct {
	r    *Redactor
	held string
	// before is the end of the text released last: whether a path may
	// start where the next text starts depends on it.
	before string
}

// NewTextHold holds text back for r.
func NewTextHold(r *Redactor) *TextHold { return &TextHold{r: r} }

// Apply is outs (the client events of one CLI message) with their text
// as it can go out now: held text first, the end that may start a path
// kept back. A streamed delta's cli event carries the same text as its
// text event, so the deltas a client reads add up to what the person
// reads; a text event with nothing to say is dropped.
func (h *TextHold) Apply(outs []Out) []Out {
	if h == nil || h.r == nil {
		return outs
	}
	kept := outs[:0]
	for _, o := range outs {
		t, ok := o.Body.(Text)
		if !ok {
			kept = append(kept, o)
			continue
		}
		text := h.held + t.Delta
		n := h.r.hold(h.before, text)
		h.held = text[len(text)-n:]
		released := text[:len(text)-n]
		switch {
		case len(released) >= 2:
			h.before = released[len(released)-2:]
		case len(released) == 1:
			h.before = h.before[max(len(h.before)-1, 0):] + released
		}
		if released != t.Delta {
			t.Delta = released
			for i := range kept {
				if c, ok := kept[i].Body.(CLI); ok {
					c.Event = withDeltaText(c.Event, released)
					kept[i].Body = c
				}
			}
		}
		if t.Delta != "" {
			o.Body = t
			kept = append(kept, o)
		}
	}
	return kept
}

// Flush is the text held back, if any, as a text event of its own: no
// delta follows it.
func (h *TextHold) Flush() (Text, bool) {
	if h == nil || h.held == "" {
		return Text{}, false
	}
	t := Text{Type: "text", Delta: h.held}
	h.held, h.before = "", ""
	return t, true
}

// withDeltaText is raw, a streamed text delta (a stream_event message),
// with text as its delta's text; raw itself for any other message.
func withDeltaText(raw json.RawMessage, text string) json.RawMessage {
	if !bytes.Contains(raw, []byte(`"text_delta"`)) {
		return raw
	}
	var msg, event, delta map[string]json.RawMessage
	if json.Unmarshal(raw, &msg) != nil || json.Unmarshal(msg["event"], &event) != nil || json.Unmarshal(event["delta"], &delta) != nil {
		return raw
	}
	var err error
	if delta["text"], err = Marshal(text); err != nil {
		return raw
	}
	event["delta"], _ = Marshal(delta)
	msg["event"], _ = Marshal(event)
	out, err := Marshal(msg)
	if err != nil {
		return raw
	}
	return out
}
