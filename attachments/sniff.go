package attachments

import (
	"bytes"
	"fmt"
	"mime"
	"net/http"
	"path"
	"strings"
	"unicode/utf8"
)

// Kind is how the model is shown a file.
type Kind int

// The kinds of file.
const (
	// Other files are named by their path in the vault: the agent can
	// read, move or cite them with its tools.
	Other Kind = iota
	// Image files (JPEG, PNG, GIF, WebP) are image blocks.
	Image
	// PDF files are document blocks.
	PDF
	// Text files (plain text, Markdown) are text blocks.
	Text
)

// sniffLen is how much of a file media types are told from
// (http.DetectContentType reads at most 512 bytes).
const sniffLen = 512

// Sniff is the media type of a file from its first bytes (head, at most
// sniffLen of them are read) and its name, never from what a client
// claims: JPEG, PNG, GIF, WebP and PDF by their signatures, UTF-8 text as
// text/plain (text/markdown for a .md or .markdown name), and anything
// else as what the content looks like (application/octet-stream when
// nothing). HTML and XML (SVG too) are never text here: a browser runs
// them.
func Sniff(name string, head []byte) (mediaType string, kind Kind) {
	if len(head) > sniffLen {
		head = head[:sniffLen]
	}
	detected, _, _ := mime.ParseMediaType(http.DetectContentType(head))
	switch detected {
	case "image/jpeg", "image/png", "image/gif", "image/webp":
		return detected, Image
	case "application/pdf":
		return detected, PDF
	case "text/plain":
		if !validUTF8Prefix(head) {
			return "application/octet-stream", Other
		}
		// An SVG needs no XML declaration, and a browser runs its
		// scripts: it is never text.
		if lead := bytes.ToLower(bytes.TrimLeft(bytes.TrimPrefix(head, []byte("\xef\xbb\xbf")), " \t\r\n")); bytes.HasPrefix(lead, []byte("<svg")) {
			return "image/svg+xml", Other
		}
		switch strings.ToLower(path.Ext(name)) {
		case ".md", ".markdown":
			return "text/markdown", Text
		}
		return "text/plain", Text
	}
	return detected, Other
}

// validUTF8Prefix reports whether b is UTF-8 but for a character cut at
// its end.
func validUTF8Prefix(b []byte) bool {
	for i := 0; i < 4 && len(b) > 0; i++ {
		if utf8.Valid(b) {
			return true
		}
		b = b[:len(b)-1]
	}
	return utf8.Valid(b)
}

// kindOfDeclared is the kind a client's declared media type stands for;
// false when it declares nothing in particular.
func kindOfDeclared(declared string) (Kind, bool) {
	mt, _, err := mime.ParseMediaType(declared)
	if err != nil || mt == "" || mt == "application/octet-stream" || mt == "binary/octet-stream" {
		return Other, false
	}
	switch mt {
	case "image/jpeg", "image/jpg", "image/pjpeg", "image/png", "image/gif", "image/webp":
		return Image, true
	case "application/pdf":
		return PDF, true
	case "text/plain", "text/markdown", "text/x-markdown":
		return Text, true
	}
	return Other, true
}

// checkDeclared refuses a file whose declared media type says it is
// another kind than its content shows (an image that is text, a PDF that
// is HTML): the client or the file lies about it.
func checkDeclared(name, declared, sniffed string, kind Kind) error {
	want, ok := kindOfDeclared(declared)
	if !ok || want == kind {
		return nil
	}
	mt, _, _ := mime.ParseMediaType(declared)
	return fmt.Errorf("%w: %q is sent as %s, but its content is %s", ErrMismatch, name, mt, sniffed)
}
