package attachments

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"unicode/utf8"

	"github.com/majorhq/major/vault"
)

// Content is what a message carries besides its text: the content blocks
// the model reads before the text, in order, and a digest of what they
// show, so a client sending the same message again (same text, same
// files, same notes) is told from one sending new files.
type Content struct {
	Blocks []json.RawMessage
	Digest string
	// Notes are the attached notes' paths, made plain (vault.CleanRel).
	Notes []string
}

// Content makes the blocks of a message that carries files (uploaded
// with it or ahead of it) and attached notes (paths relative to the
// person's folder): for each file a line naming it and where it is in the
// vault, then the file itself as the model takes it (an image or document
// block, its text, or nothing more for other files); then each note's
// text, delimited and named. Files over the message's bounds, and notes
// the guard refuses (vault.ErrOutsideFolder, vault.ErrProtectedName),
// are an error naming them.
func (s *Store) Content(person string, files []File, notes []string) (Content, error) {
	lim := s.cfg.Limits
	if len(files) > lim.Files {
		return Content{}, fmt.Errorf("%w: a message may carry at most %d files; this one has %d", ErrTooMany, lim.Files, len(files))
	}
	var total int64
	for _, f := range files {
		total += f.Size
	}
	if total > lim.MessageBytes {
		return Content{}, fmt.Errorf("%w: the files of one message may have %s together; these have %s", ErrTooLarge,
			Size(lim.MessageBytes), Size(total))
	}
	digest := sha256.New()
	var out Content
	for _, f := range files {
		blocks, err := s.fileBlocks(person, f)
		if err != nil {
			return Content{}, err
		}
		out.Blocks = append(out.Blocks, blocks...)
		fmt.Fprintf(digest, "file %x\n", f.sum)
	}
	seen := map[string]bool{}
	for _, p := range notes {
		clean, err := vault.CleanRel(p)
		if err != nil {
			return Content{}, err
		}
		if seen[clean] {
			continue
		}
		seen[clean] = true
		block, err := s.noteBlock(person, p, clean)
		if err != nil {
			return Content{}, err
		}
		out.Blocks = append(out.Blocks, block)
		out.Notes = append(out.Notes, clean)
		fmt.Fprintf(digest, "note %s\n", clean)
	}
	if len(out.Blocks) > 0 {
		out.Digest = hex.EncodeToString(digest.Sum(nil))
	}
	return out, nil
}

// fileBlocks reads an uploaded file back from the vault and makes its
// blocks. It is sniffed again: the agent may have changed it since.
func (s *Store) fileBlocks(person string, f File) ([]json.RawMessage, error) {
	file, _, err := s.guard.Open(person, f.Path)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %w", ErrUnknown, f.Name, err)
	}
	defer file.Close()
	data, err := io.ReadAll(io.LimitReader(file, s.cfg.Limits.FileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", f.Path, err)
	}
	mt, kind := Sniff(f.Path, data)
	label := fmt.Sprintf("[Attached file %q (%s, %s), saved in the person's notes at %s]", f.Name, mt, Size(int64(len(data))), f.Path)
	switch kind {
	case Image:
		img, imgType, err := fitImage(data, mt, s.cfg.Limits.ImageEdge, maxImageBytes)
		if err != nil {
			return nil, fmt.Errorf("%w: %q: %w", ErrMismatch, f.Name, err)
		}
		if imgType != mt || len(img) != len(data) {
			label = strings.TrimSuffix(label, "]") + "; shown here scaled down]"
		}
		return []json.RawMessage{textBlock(label), sourceBlock("image", imgType, img, "")}, nil
	case PDF:
		return []json.RawMessage{textBlock(label), sourceBlock("document", mt, data, f.Name)}, nil
	case Text:
		return []json.RawMessage{textBlock(delimited(label, "file "+f.Path, data, len(data), s.cfg.Limits.NoteBytes))}, nil
	}
	return []json.RawMessage{textBlock(strings.TrimSuffix(label, "]") + "; it is not shown here: use your tools on it if you need its content]")}, nil
}

// noteBlock is an attached note's text, delimited and named. Only text
// notes can be attached.
func (s *Store) noteBlock(person, asGiven, clean string) (json.RawMessage, error) {
	f, st, err := s.guard.Open(person, clean)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%w %q: there is no such note in your folder", ErrBadNote, asGiven)
	case errors.Is(err, vault.ErrNotFile):
		return nil, fmt.Errorf("%w %q: it is not a file", ErrBadNote, asGiven)
	case err != nil:
		return nil, err
	}
	defer f.Close()
	cap := s.cfg.Limits.NoteBytes
	data, err := io.ReadAll(io.LimitReader(f, int64(cap)))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", clean, err)
	}
	if _, kind := Sniff(clean, data); kind != Text {
		return nil, fmt.Errorf("%w %q: it is not a text note; send it as a file instead", ErrBadNote, asGiven)
	}
	label := fmt.Sprintf("[Attached note %s: the person attached this note from their notes as primary context for this message]", clean)
	return textBlock(delimited(label, "note "+clean, data, int(st.Size()), cap)), nil
}

// delimited is text between a label and an end line naming what, cut at
// most max bytes (at a character's start) with a line saying so when the
// whole (size bytes) is longer.
func delimited(label, what string, text []byte, size, max int) string {
	var sb strings.Builder
	sb.WriteString(label)
	sb.WriteString("\n")
	cut := len(text) > max || size > len(text)
	if len(text) > max {
		text = text[:max]
		// Not in the middle of a character.
		for i := 0; i < utf8.UTFMax-1 && len(text) > 0; i++ {
			if r, n := utf8.DecodeLastRune(text); r != utf8.RuneError || n > 1 {
				break
			}
			text = text[:len(text)-1]
		}
	}
	sb.Write(text)
	if len(text) > 0 && text[len(text)-1] != '\n' {
		sb.WriteString("\n")
	}
	if cut {
		fmt.Fprintf(&sb, "[cut: the %s has %s; only the first %s are shown here. Read the rest with your tools.]\n", what, Size(int64(size)), Size(int64(len(text))))
	}
	fmt.Fprintf(&sb, "[end of %s]", what)
	return sb.String()
}

// HistoryEntry is one message of a conversation imported into a new
// session.
type HistoryEntry struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ErrBadHistory is an imported conversation that cannot be taken.
var ErrBadHistory = errors.New("malformed history")

// MaxHistory bounds the messages of an imported conversation (the
// request's body bounds its size).
const MaxHistory = 1000

// CheckHistory returns nil when entries can be imported, and otherwise an
// ErrBadHistory naming the first entry that cannot.
func CheckHistory(entries []HistoryEntry) error {
	if len(entries) > MaxHistory {
		return fmt.Errorf("%w: %d messages; at most %d can be imported", ErrBadHistory, len(entries), MaxHistory)
	}
	for i, e := range entries {
		switch {
		case e.Role != "user" && e.Role != "assistant":
			return fmt.Errorf("%w: history[%d]: role must be \"user\" or \"assistant\", not %q", ErrBadHistory, i, e.Role)
		case strings.TrimSpace(e.Content) == "":
			return fmt.Errorf("%w: history[%d]: content is empty", ErrBadHistory, i)
		case !utf8.ValidString(e.Content):
			return fmt.Errorf("%w: history[%d]: content is not valid UTF-8", ErrBadHistory, i)
		}
	}
	return nil
}

// HistoryBlock is an imported conversation as the model is given it with
// the session's first message: the exchange, oldest first, delimited.
func HistoryBlock(entries []HistoryEntry) json.RawMessage {
	var sb strings.Builder
	sb.WriteString("[Earlier conversation: this chat continues a conversation the person had before; it is imported here, oldest message first. Answer the message after it knowing all of it.]\n")
	for _, e := range entries {
		who := "Person"
		if e.Role == "assistant" {
			who = "Assistant"
		}
		fmt.Fprintf(&sb, "\n%s: %s\n", who, e.Content)
	}
	sb.WriteString("\n[end of the earlier conversation]")
	return textBlock(sb.String())
}

func textBlock(text string) json.RawMessage {
	b, _ := json.Marshal(map[string]string{"type": "text", "text": text})
	return b
}

// sourceBlock is an image or document block with its data in base64.
func sourceBlock(typ, mediaType string, data []byte, title string) json.RawMessage {
	block := map[string]any{"type": typ, "source": map[string]string{
		"type": "base64", "media_type": mediaType, "data": base64.StdEncoding.EncodeToString(data)}}
	if title != "" {
		block["title"] = title
	}
	b, _ := json.Marshal(block)
	return b
}
