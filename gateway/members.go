package gateway

import (
	"bytes"
	"encoding/json"
)

// maxMemberName bounds a member name topMembers reads: the names it keeps
// are short, even written with \u escapes; a longer name is none of them.
const maxMemberName = 128

// topMembers reads a JSON object as it passes, a chunk at a time, and keeps
// the values of a few of its top-level members, compact (without the
// whitespace between tokens), each up to maxValue bytes; it keeps nothing else, so an object of any length is read in
// constant memory. Of a name given twice it keeps the last value, as
// encoding/json does. It only tracks strings and nesting, and does not
// check the rest of the syntax: what it keeps of a body that is not JSON
// is whatever the caller's own decoding makes of it.
type topMembers struct {
	names    []string
	maxValue int

	depth    int
	inString bool
	escaped  bool
	state    memberState
	broken   bool // the body is not an object

	name     []byte // the raw name being read, quotes included
	nameLong bool
	keeping  int // 1 + the index in names of the value being kept; 0: none
	kept     []byte
	tooLong  bool

	values [][]byte // by index in names; nil: not seen, or too long
}

// memberState is where topMembers is inside the object, at depth 1.
type memberState uint8

const (
	wantName  memberState = iota // after '{' or ','
	wantColon                    // after a name
	inValue                      // after ':'
)

func newTopMembers(maxValue int, names ...string) *topMembers {
	return &topMembers{names: names, maxValue: maxValue, values: make([][]byte, len(names))}
}

// value returns the raw value of the member name (as last seen), or nil.
func (t *topMembers) value(name string) []byte {
	for i, n := range t.names {
		if n == name {
			return t.values[i]
		}
	}
	return nil
}

func (t *topMembers) write(p []byte) {
	for len(p) > 0 && !t.broken {
		if t.inString {
			p = t.stringBytes(p)
			continue
		}
		c := p[0]
		p = p[1:]
		if t.depth == 0 {
			switch c {
			case '{':
				t.depth, t.state = 1, wantName
			case ' ', '\t', '\n', '\r':
			default:
				// Not an object, or something after its end.
				t.broken = true
			}
			continue
		}
		if t.depth == 1 {
			switch {
			case c == '"' && t.state == wantName:
				t.inString, t.name, t.nameLong = true, append(t.name[:0], c), false
				continue
			case c == ':' && t.state == wantColon:
				t.state = inValue
				t.startValue()
				continue
			case c == ',' && t.state == inValue:
				t.endValue()
				t.state = wantName
				continue
			case c == '}':
				if t.state == inValue {
					t.endValue()
				}
				t.depth = 0
				continue
			}
		}
		switch c {
		case ' ', '\t', '\n', '\r':
			continue // kept values are compact
		case '"':
			t.inString = true
		case '{', '[':
			t.depth++
		case '}', ']':
			t.depth--
		}
		t.keep([]byte{c})
	}
}

// stringBytes reads p inside a string (a member name at depth 1, or any
// string of a value) up to and including its closing quote, and returns
// the rest.
func (t *topMembers) stringBytes(p []byte) []byte {
	readingName := t.depth == 1 && t.state == wantName
	n := 0
	for n < len(p) {
		if t.escaped {
			t.escaped = false
			n++
			continue
		}
		// Most of a long answer is text inside strings: skip to the next
		// byte that matters.
		i := bytes.IndexAny(p[n:], `"\`)
		if i < 0 {
			n = len(p)
			break
		}
		n += i
		if p[n] == '\\' {
			t.escaped = true
			n++
			continue
		}
		n++ // the closing quote
		t.inString = false
		break
	}
	if readingName {
		if len(t.name)+n > maxMemberName {
			t.nameLong = true
		} else {
			t.name = append(t.name, p[:n]...)
		}
		if !t.inString {
			t.state = wantColon
		}
	} else {
		t.keep(p[:n])
	}
	return p[n:]
}

// startValue decides, at a member's ':', whether its value is kept.
func (t *topMembers) startValue() {
	t.keeping, t.kept, t.tooLong = 0, t.kept[:0], false
	if t.nameLong {
		return
	}
	var name string
	if json.Unmarshal(t.name, &name) != nil {
		return
	}
	for i, n := range t.names {
		if n == name {
			t.keeping = i + 1
			return
		}
	}
}

func (t *topMembers) keep(p []byte) {
	if t.keeping == 0 || t.tooLong {
		return
	}
	if len(t.kept)+len(p) > t.maxValue {
		t.tooLong, t.kept = true, t.kept[:0]
		return
	}
	t.kept = append(t.kept, p...)
}

// endValue stores the value kept, at the ',' or '}' that ends it. A value
// too long to keep replaces an earlier one all the same: the last one
// given is the one that counts.
func (t *topMembers) endValue() {
	if t.keeping == 0 {
		return
	}
	i := t.keeping - 1
	t.values[i] = nil
	if !t.tooLong {
		t.values[i] = bytes.Clone(t.kept)
	}
	t.keeping = 0
}
