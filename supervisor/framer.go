package supervisor

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// DefaultMaxLine is the longest line a Framer returns by default. The CLI
// puts a whole message on one line, and each of its messages is part of
// one model request or answer: the API takes at most 32 MB a request, the
// CLI cuts a tool's text result down (a long one goes to a file) and
// scales an image to the API's 5 MB, and a PDF read whole is at most
// 20 MB (27 MB of base64). Anything in the sandbox can write onto the
// CLI's output too, so a line past this is skipped, not kept.
const DefaultMaxLine = 64 << 20

// ErrLineTooLong is returned (wrapped) for a line over the Framer's limit; the
// line is skipped and the next call reads the line after it.
var ErrLineTooLong = errors.New("line too long")

// Framer splits a byte stream into newline-terminated lines of any size up
// to a limit, unlike bufio.Scanner with its fixed buffer.
type Framer struct {
	r   *bufio.Reader
	max int
}

// NewFramer returns a Framer reading r; max <= 0 means DefaultMaxLine.
func NewFramer(r io.Reader, max int) *Framer {
	if max <= 0 {
		max = DefaultMaxLine
	}
	return &Framer{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

// Next returns the next non-empty line without its line ending. The slice is
// the caller's to keep. At the end of the stream it returns io.EOF; a last
// line without a newline is returned first.
func (f *Framer) Next() ([]byte, error) {
	for {
		line, err := f.line()
		if err != nil {
			return nil, err
		}
		line = bytes.TrimRight(line, "\r")
		if len(bytes.TrimSpace(line)) > 0 {
			return line, nil
		}
	}
}

func (f *Framer) line() ([]byte, error) {
	var buf []byte
	tooLong := false
	for {
		chunk, err := f.r.ReadSlice('\n')
		if !tooLong {
			if len(buf)+len(chunk) > f.max+1 {
				tooLong = true
				buf = nil
			} else {
				buf = append(buf, chunk...)
			}
		}
		switch {
		case err == nil:
			if tooLong {
				return nil, fmt.Errorf("%w: over %d bytes", ErrLineTooLong, f.max)
			}
			return buf[:len(buf)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			// A last line has no newline: its limit is max itself.
			if tooLong || len(buf) > f.max {
				return nil, fmt.Errorf("%w: over %d bytes", ErrLineTooLong, f.max)
			}
			if len(buf) > 0 {
				return buf, nil
			}
			return nil, io.EOF
		default:
			return nil, err
		}
	}
}
