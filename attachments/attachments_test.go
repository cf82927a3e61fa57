package attachments

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/majorhq/major/vault"
)

// newStore is a store on a fresh vault with the persons sebastian and
// petra, in May 2026.
func newStore(tb testing.TB, lim Limits) (*Store, string) {
	tb.Helper()
	root := tb.TempDir()
	for _, p := range []string{"sebastian", "petra"} {
		if err := os.MkdirAll(filepath.Join(root, p), 0o755); err != nil {
			tb.Fatal(err)
		}
	}
	now := time.Date(2026, 5, 14, 10, 0, 0, 0, time.UTC)
	return New(Config{VaultRoot: root, Limits: lim, Now: func() time.Time { return now }}), root
}

// files lists every file under dir, relative to it.
func files(tb testing.TB, dir string) []string {
	tb.Helper()
	var out []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	return out
}

func pngBytes(tb testing.TB, w, h int, alpha bool) []byte {
	tb.Helper()
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			a := uint8(255)
			if alpha && x == 0 {
				a = 10
			}
			img.Set(x, y, color.NRGBA{R: uint8(x), G: uint8(y), B: 90, A: a})
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

func TestCheckName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"whiteboard.jpg", true},
		{"Rechnung März 2026.pdf", true},
		{"notes (2).md", true},
		{"../../x", false},
		{"a/b", false},
		{`a\b`, false},
		{".git", false},
		{".env", false},
		{"CLAUDE.md", false},
		{"claude.md", false},
		{"CLAUDE~1.MD", false},
		{"x\x00.png", false},
		{"x\n.png", false},
		{"", false},
		{"..", false},
		{"x.png.", false},
		{" x.png", false},
		{"x.png:evil", false},
		{strings.Repeat("a", 256), false},
		{"\xff.png", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckName(tc.name)
			if (err == nil) != tc.ok {
				t.Fatalf("CheckName(%q) = %v, want ok=%v", tc.name, err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrBadName) {
				t.Fatalf("error %v is not ErrBadName", err)
			}
		})
	}
}

func TestSniff(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		head       []byte
		want       string
		kind       Kind
	}{
		{"png", "x.bin", pngBytes(t, 2, 2, false), "image/png", Image},
		{"jpeg", "x", []byte("\xff\xd8\xff\xe0\x00\x10JFIF"), "image/jpeg", Image},
		{"gif", "x", []byte("GIF89a\x01\x00\x01\x00"), "image/gif", Image},
		{"webp", "x", []byte("RIFF\x00\x00\x00\x00WEBPVP8 "), "image/webp", Image},
		{"pdf", "x.txt", []byte("%PDF-1.7\n"), "application/pdf", PDF},
		{"text", "a.txt", []byte("hello\n"), "text/plain", Text},
		{"markdown", "a.md", []byte("# Title\n"), "text/markdown", Text},
		{"html is not text", "a.txt", []byte("<html><script>alert(1)</script>"), "text/html", Other},
		{"svg is not an image", "a.svg", []byte(`<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>`), "text/xml", Other},
		{"svg without a declaration", "a.txt", []byte("\n <svg xmlns='http://www.w3.org/2000/svg' onload='alert(1)'/>"), "image/svg+xml", Other},
		{"binary", "a.png", []byte{0, 1, 2, 3, 0xfe}, "application/octet-stream", Other},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mt, kind := Sniff(tc.file, tc.head)
			if mt != tc.want || kind != tc.kind {
				t.Fatalf("Sniff = %s, %v; want %s, %v", mt, kind, tc.want, tc.kind)
			}
		})
	}
}

func TestUploadSavesUnderSafeNames(t *testing.T) {
	s, root := newStore(t, Limits{})
	u := s.Begin(context.Background(), "sebastian")
	a, err := u.Add("note.txt", "text/plain", strings.NewReader("first"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := u.Add("note.txt", "", strings.NewReader("second"))
	if err != nil {
		t.Fatal(err)
	}
	u.Keep()
	if a.Path != "attachments/2026-05/note.txt" || b.Path != "attachments/2026-05/note (2).txt" {
		t.Fatalf("paths %q, %q", a.Path, b.Path)
	}
	if b.Name != "note.txt" || b.MediaType != "text/plain" || b.Size != 6 || a.ID == b.ID || !strings.HasPrefix(a.ID, "att_") {
		t.Fatalf("file %+v", b)
	}
	got, err := s.Lookup("sebastian", []string{b.ID})
	if err != nil || got[0].Path != b.Path {
		t.Fatalf("lookup: %v %+v", err, got)
	}
	if _, err := s.Lookup("petra", []string{b.ID}); !errors.Is(err, ErrUnknown) {
		t.Fatalf("another person's id: %v", err)
	}
	if f := files(t, root); len(f) != 2 {
		t.Fatalf("vault holds %q", f)
	}
}

// TestUploadRefusals: each hostile or oversize upload gets its own error
// and leaves no file behind, and Discard takes back the files of the
// request that were saved before the bad one.
func TestUploadRefusals(t *testing.T) {
	lim := Limits{FileBytes: 100, Files: 2, MessageBytes: 150}
	for _, tc := range []struct {
		name, file, declared string
		body                 io.Reader
		want                 error
		says                 string
	}{
		{"climbing name", "../../x", "", strings.NewReader("x"), ErrBadName, "folder separator"},
		{"git", ".git", "", strings.NewReader("x"), ErrBadName, "starts with a dot"},
		{"claude.md", "CLAUDE.md", "", strings.NewReader("x"), ErrBadName, "configures the assistant"},
		{"separator", "a/b", "", strings.NewReader("x"), ErrBadName, "folder separator"},
		{"nul", "a\x00b", "", strings.NewReader("x"), ErrBadName, "control character"},
		{"oversize", "big.txt", "", strings.NewReader(strings.Repeat("x", 101)), ErrTooLarge, "100 bytes one file may have"},
		{"over the message", "big.txt", "", strings.NewReader(strings.Repeat("x", 95)), ErrTooLarge, "150 bytes together"},
		{"lying type", "cat.png", "image/png", strings.NewReader("<html><script>alert(1)</script></html>"), ErrMismatch, "sent as image/png, but its content is text/html"},
		{"text sent as pdf", "x.pdf", "application/pdf", strings.NewReader("plain words"), ErrMismatch, "sent as application/pdf"},
		{"broken image", "x.png", "", bytes.NewReader(pngBytes(t, 4, 4, false)[:20]), ErrMismatch, "not a readable image/png image"},
		{"cut off", "x.txt", "", iotest.ErrReader(io.ErrUnexpectedEOF), ErrCutOff, "cut off"},
		{"cut off halfway", "x.txt", "", io.MultiReader(strings.NewReader("half"), iotest.ErrReader(io.ErrUnexpectedEOF)), ErrCutOff, "cut off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, root := newStore(t, lim)
			u := s.Begin(context.Background(), "sebastian")
			if _, err := u.Add("first.txt", "", strings.NewReader(strings.Repeat("f", 60))); err != nil {
				t.Fatal(err)
			}
			_, err := u.Add(tc.file, tc.declared, tc.body)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("Add = %v; want %v saying %q", err, tc.want, tc.says)
			}
			if f := files(t, root); len(f) != 1 {
				t.Fatalf("after the refusal the vault holds %q", f)
			}
			u.Discard()
			if f := files(t, root); len(f) != 0 {
				t.Fatalf("after Discard the vault holds %q", f)
			}
			if _, err := os.Stat(filepath.Join(root, "sebastian", Dir)); !os.IsNotExist(err) {
				t.Fatalf("after Discard the attachments folder is still there: %v", err)
			}
		})
	}
	t.Run("a first upload refused makes no folder", func(t *testing.T) {
		s, root := newStore(t, lim)
		u := s.Begin(context.Background(), "sebastian")
		if _, err := u.Add("x.pdf", "application/pdf", strings.NewReader("text")); !errors.Is(err, ErrMismatch) {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(root, "sebastian", Dir)); !os.IsNotExist(err) {
			t.Fatalf("a refused upload left the attachments folder: %v", err)
		}
	})
	t.Run("too many", func(t *testing.T) {
		s, _ := newStore(t, lim)
		u := s.Begin(context.Background(), "sebastian")
		for i := 0; i < 2; i++ {
			if _, err := u.Add("a.txt", "", strings.NewReader("a")); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := u.Add("a.txt", "", strings.NewReader("a")); !errors.Is(err, ErrTooMany) || !strings.Contains(err.Error(), "at most 2 files") {
			t.Fatalf("third file: %v", err)
		}
	})
}

// TestUploadNeverLeavesTheFolder: an attachments folder the agent made a
// link to another person's folder is not followed.
func TestUploadNeverLeavesTheFolder(t *testing.T) {
	s, root := newStore(t, Limits{})
	if err := os.Symlink(filepath.Join(root, "petra"), filepath.Join(root, "sebastian", "attachments")); err != nil {
		t.Fatal(err)
	}
	u := s.Begin(context.Background(), "sebastian")
	if _, err := u.Add("x.txt", "", strings.NewReader("x")); err == nil {
		t.Fatal("an upload followed a link out of the person's folder")
	}
	if f := files(t, filepath.Join(root, "petra")); len(f) != 0 {
		t.Fatalf("petra's folder got %q", f)
	}
}

// blockOf decodes a content block.
type blockOf struct {
	Type   string `json:"type"`
	Text   string `json:"text"`
	Title  string `json:"title"`
	Source struct {
		MediaType string `json:"media_type"`
		Data      string `json:"data"`
	} `json:"source"`
}

func decodeBlocks(tb testing.TB, c Content) []blockOf {
	tb.Helper()
	out := make([]blockOf, len(c.Blocks))
	for i, b := range c.Blocks {
		if err := json.Unmarshal(b, &out[i]); err != nil {
			tb.Fatal(err)
		}
	}
	return out
}

func TestContentBlocks(t *testing.T) {
	s, root := newStore(t, Limits{ImageEdge: 64, NoteBytes: 20})
	u := s.Begin(context.Background(), "sebastian")
	small, _ := u.Add("small.png", "image/png", bytes.NewReader(pngBytes(t, 10, 8, false)))
	big, _ := u.Add("big.png", "", bytes.NewReader(pngBytes(t, 200, 100, false)))
	doc, _ := u.Add("scan.pdf", "", strings.NewReader("%PDF-1.4\n%%EOF\n"))
	txt, _ := u.Add("todo.md", "", strings.NewReader("# Todo\n- milk\n"))
	zip, err := u.Add("data.bin", "", bytes.NewReader([]byte{0, 1, 2}))
	if err != nil {
		t.Fatal(err)
	}
	u.Keep()
	if err := os.WriteFile(filepath.Join(root, "sebastian", "long.md"), []byte(strings.Repeat("é", 30)), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := s.Content("sebastian", []File{small, big, doc, txt, zip}, []string{"long.md"})
	if err != nil {
		t.Fatal(err)
	}
	bl := decodeBlocks(t, c)
	types := []string{}
	for _, b := range bl {
		types = append(types, b.Type)
	}
	if got := strings.Join(types, ","); got != "text,image,text,image,text,document,text,text,text" {
		t.Fatalf("blocks %s", got)
	}
	if !strings.Contains(bl[0].Text, `"small.png"`) || !strings.Contains(bl[0].Text, "attachments/2026-05/small.png") {
		t.Fatalf("label %q", bl[0].Text)
	}
	if raw, _ := base64.StdEncoding.DecodeString(bl[1].Source.Data); !bytes.Equal(raw, pngBytes(t, 10, 8, false)) {
		t.Fatal("a small image is not sent as it is")
	}
	// The large one is scaled to 64×32; the vault keeps the original.
	raw, _ := base64.StdEncoding.DecodeString(bl[3].Source.Data)
	cfg, _, err := image.DecodeConfig(bytes.NewReader(raw))
	if err != nil || cfg.Width != 64 || cfg.Height != 32 || bl[3].Source.MediaType != "image/jpeg" {
		t.Fatalf("scaled image: %v %+v %s", err, cfg, bl[3].Source.MediaType)
	}
	if !strings.Contains(bl[2].Text, "scaled down") {
		t.Fatalf("label %q does not say it is scaled", bl[2].Text)
	}
	if st, _ := os.Stat(filepath.Join(root, "sebastian", big.Path)); st.Size() != big.Size {
		t.Fatal("the original image changed")
	}
	if bl[5].Source.MediaType != "application/pdf" || bl[5].Title != "scan.pdf" {
		t.Fatalf("document %+v", bl[5])
	}
	if !strings.Contains(bl[6].Text, "- milk") || !strings.HasSuffix(bl[6].Text, "[end of file attachments/2026-05/todo.md]") {
		t.Fatalf("text file %q", bl[6].Text)
	}
	if !strings.Contains(bl[7].Text, "data.bin") || !strings.Contains(bl[7].Text, "not shown here") {
		t.Fatalf("other file %q", bl[7].Text)
	}
	note := bl[8].Text
	if !strings.Contains(note, "Attached note long.md") || !strings.Contains(note, "[cut: the note long.md has 60 bytes; only the first 20 bytes are shown") ||
		!strings.Contains(note, strings.Repeat("é", 10)+"\n[cut") {
		t.Fatalf("note %q", note)
	}
	again, _ := s.Content("sebastian", []File{small, big, doc, txt, zip}, []string{"long.md"})
	other, _ := s.Content("sebastian", []File{small}, nil)
	if c.Digest == "" || again.Digest != c.Digest || other.Digest == c.Digest {
		t.Fatal("the digest does not tell the same content from other content")
	}
}

// TestImageWithTransparency stays PNG when scaled down.
func TestImageWithTransparency(t *testing.T) {
	data, mt, err := fitImage(pngBytes(t, 300, 30, true), "image/png", 100, maxImageBytes)
	if err != nil || mt != "image/png" {
		t.Fatalf("%v %s", err, mt)
	}
	if cfg, err := png.DecodeConfig(bytes.NewReader(data)); err != nil || cfg.Width != 100 || cfg.Height != 10 {
		t.Fatalf("%v %+v", err, cfg)
	}
	// A photo of few pixels but many bytes is made smaller too.
	img := image.NewRGBA(image.Rect(0, 0, 300, 300))
	for i := range img.Pix {
		img.Pix[i] = uint8(i * 7919 % 251)
	}
	var buf bytes.Buffer
	_ = jpeg.Encode(&buf, img, &jpeg.Options{Quality: 100})
	const bound = 40_000
	if buf.Len() <= bound {
		t.Fatalf("the noise photo is only %d bytes; the test needs one over the bound", buf.Len())
	}
	out, _, err := fitImage(buf.Bytes(), "image/jpeg", 2000, bound)
	if err != nil || len(out) > bound {
		t.Fatalf("%v, %d bytes", err, len(out))
	}
}

func TestAttachedNotesStayInTheFolder(t *testing.T) {
	s, root := newStore(t, Limits{})
	for p, body := range map[string]string{"sebastian/ok.md": "mine", "petra/secret.md": "hers", "sebastian/pic.png": string(pngBytes(t, 2, 2, false))} {
		if err := os.WriteFile(filepath.Join(root, p), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_ = os.Symlink(filepath.Join(root, "petra", "secret.md"), filepath.Join(root, "sebastian", "link.md"))
	for _, tc := range []struct {
		path string
		want error
	}{
		{"ok.md", nil},
		{"../petra/secret.md", vault.ErrOutsideFolder},
		{filepath.Join(root, "petra", "secret.md"), vault.ErrOutsideFolder},
		{"link.md", vault.ErrOutsideFolder},
		{"CLAUDE.md", vault.ErrProtectedName},
		{".git/config", vault.ErrProtectedName},
		{"missing.md", ErrBadNote},
		{"pic.png", ErrBadNote},
	} {
		t.Run(tc.path, func(t *testing.T) {
			c, err := s.Content("sebastian", nil, []string{tc.path})
			if !errors.Is(err, tc.want) {
				t.Fatalf("Content = %v, want %v", err, tc.want)
			}
			if err != nil && !strings.Contains(err.Error(), tc.path) {
				t.Fatalf("the error %q does not name %q", err, tc.path)
			}
			if err == nil && !strings.Contains(decodeBlocks(t, c)[0].Text, "mine") {
				t.Fatal("the note's text is not in its block")
			}
			if err != nil && strings.Contains(err.Error(), "hers") {
				t.Fatal("the error shows another person's note")
			}
		})
	}
}
