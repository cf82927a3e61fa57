package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/textproto"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// part is one file of a multipart request: its name as sent, the media
// type the client declares ("" none) and its content.
type part struct {
	name, ctype string
	body        []byte
}

// multipartBody is a multipart/form-data body with fields and files
// (parts named files), and its content type. Names go into the header
// exactly as given, so a test can send a hostile one.
func multipartBody(tb testing.TB, fields map[string]string, files ...part) (string, []byte) {
	tb.Helper()
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		_ = w.WriteField(k, fields[k])
	}
	for _, f := range files {
		h := textproto.MIMEHeader{}
		disposition := `form-data; name="files"; filename="` + strings.ReplaceAll(f.name, `"`, `\"`) + `"`
		if strings.HasPrefix(f.name, "*=") {
			// Already encoded (RFC 2231), for names a header line
			// cannot hold as they are.
			disposition = `form-data; name="files"; filename` + f.name
		}
		h.Set("Content-Disposition", disposition)
		if f.ctype != "" {
			h.Set("Content-Type", f.ctype)
		}
		pw, err := w.CreatePart(h)
		if err != nil {
			tb.Fatal(err)
		}
		_, _ = pw.Write(f.body)
	}
	_ = w.Close()
	return w.FormDataContentType(), buf.Bytes()
}

// post sends body to path as person and returns the status and the body.
func (s *server) post(tb testing.TB, person, path, ctype string, body []byte) (int, string) {
	tb.Helper()
	req, _ := http.NewRequest("POST", s.url+path, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("X-Notes-Person", person)
	req.Header.Set("Content-Type", ctype)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	return resp.StatusCode, readAll(tb, resp)
}

// get fetches path as person.
func (s *server) get(tb testing.TB, person, path string, header ...string) *http.Response {
	tb.Helper()
	req, _ := http.NewRequest("GET", s.url+path, nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("X-Notes-Person", person)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	return resp
}

// chatReply is a /chat answer.
type chatReply struct {
	SessionID string `json:"session_id"`
	Response  string `json:"response"`
	Error     string `json:"error"`
}

func testPNG(tb testing.TB, w, h int) []byte {
	tb.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for i := range img.Pix {
		img.Pix[i] = uint8(i % 253)
		if i%4 == 3 {
			img.Pix[i] = 255 // opaque: a photo
		}
	}
	img.Set(0, 0, color.RGBA{1, 2, 3, 255})
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// vaultFiles lists the files under the person's attachments folder.
func vaultFiles(tb testing.TB, s *server, person string) []string {
	tb.Helper()
	var out []string
	root := filepath.Join(s.env.Vault(person), "attachments")
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(s.env.Vault(person), p)
			out = append(out, rel)
		}
		return nil
	})
	return out
}

// TestAttachmentsThroughCLI runs messages with files and notes through the
// whole server, the sandboxed real CLI and the scripted model:
//   - an image, a PDF and a Markdown file sent with a message reach the
//     model as an image block (scaled down to the image edge), a document
//     block and the file's text, each after a line naming its path, the
//     message's text last; they are saved under attachments/YYYY-MM/ and
//     committed with the turn; the turn's start and both histories name
//     them;
//   - hostile names, an oversize file, too many files, a lying content
//     type, a body cut off halfway and a file uploaded ahead that nobody
//     knows each get their own error and leave no file behind;
//   - notes attached from the person's folder reach the model delimited
//     and named; one of another person's or a protected one is 403 naming
//     the path.
func TestAttachmentsThroughCLI(t *testing.T) {
	t.Parallel()
	s := start(t, "--attachment-max-file-mb", "1", "--attachment-max-files", "3", "--attachment-image-edge", "300")
	month := time.Now().UTC().Format("2006-01")
	step := func(name string, f func(t *testing.T)) {
		if !t.Run(name, f) {
			t.FailNow()
		}
	}
	var id string
	step("files reach the model as their blocks and are committed", func(t *testing.T) {
		pdf := []byte("%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n")
		ctype, body := multipartBody(t, map[string]string{"message": "put these in my notes [[blocks]]"},
			part{"whiteboard.png", "image/png", testPNG(t, 600, 200)},
			part{"receipt.pdf", "application/pdf", pdf},
			part{"Einkauf März.md", "", []byte("# Einkauf\n- Milch\n")})
		code, out := s.post(t, "sebastian", "/api/claude/chat", ctype, body)
		var r chatReply
		if err := json.Unmarshal([]byte(out), &r); err != nil || code != http.StatusOK {
			t.Fatalf("chat: %d %s", code, out)
		}
		id = r.SessionID
		for _, want := range []string{
			`text [Attached file "whiteboard.png" (image/png`, "attachments/" + month + "/whiteboard.png; shown here scaled down] | image image/jpeg",
			`text [Attached file "receipt.pdf" (application/pdf`, fmt.Sprintf(`| document application/pdf %d "receipt.pdf" |`, len(pdf)),
			`text [Attached file "Einkauf März.md" (text/markdown`, "# Einkauf - Milch [end of file attachments/" + month + "/Einkauf März.md]",
			"| text put these in my notes [[blocks]]",
		} {
			if !strings.Contains(r.Response, want) {
				t.Fatalf("the model saw %q\nwithout %q", r.Response, want)
			}
		}
		// The scaled image is 300×100; the vault keeps the 600×200 one.
		reqs := s.env.Model.Requests()
		for _, b := range reqs[len(reqs)-1].LastUser().Content {
			if b.Type == "image" {
				raw, _ := base64.StdEncoding.DecodeString(b.Source.Data)
				cfg, _, err := image.DecodeConfig(bytes.NewReader(raw))
				if err != nil || cfg.Width != 300 || cfg.Height != 100 {
					t.Fatalf("the model got an image of %+v (%v)", cfg, err)
				}
			}
		}
		saved, err := os.ReadFile(filepath.Join(s.env.Vault("sebastian"), "attachments", month, "whiteboard.png"))
		if err != nil || !bytes.Equal(saved, testPNG(t, 600, 200)) {
			t.Fatalf("the original image is not in the vault: %v", err)
		}
		status := gitOut(t, s.env.VaultRoot, "status", "--porcelain", "--", "sebastian/")
		logged := gitOut(t, s.env.VaultRoot, "log", "--format=%s", "--name-only", "-1")
		if status != "" || !strings.Contains(logged, "Session "+id) || !strings.Contains(logged, "sebastian/attachments/"+month+"/receipt.pdf") {
			t.Fatalf("not committed with the turn: status %q, last commit %q", status, logged)
		}
		code, msgs := apiClient(s).Call(t, "GET", "/api/claude/sessions/"+id+"/messages", "sebastian", nil)
		first := msgs["messages"].([]any)[0].(map[string]any)
		files, _ := first["attachments"].([]any)
		if code != 200 || len(files) != 3 || files[0].(map[string]any)["path"] != "attachments/"+month+"/whiteboard.png" ||
			files[2].(map[string]any)["name"] != "Einkauf März.md" {
			t.Fatalf("rich history: %v", first)
		}
		_, hist := apiClient(s).Call(t, "GET", "/api/claude/history?session_id="+id, "sebastian", nil)
		user := hist["messages"].([]any)[0].(map[string]any)["content"]
		if user != "put these in my notes [[blocks]]\n[attached: whiteboard.png]\n[attached: receipt.pdf]\n[attached: Einkauf März.md]" {
			t.Fatalf("compat history user message %q", user)
		}
	})

	before := vaultFiles(t, s, "sebastian")
	refused := func(t *testing.T, code int, out string, wantCode int, says string) {
		t.Helper()
		if code != wantCode || !strings.Contains(out, says) {
			t.Fatalf("got %d %s; want %d saying %q", code, out, wantCode, says)
		}
		if after := vaultFiles(t, s, "sebastian"); strings.Join(after, ",") != strings.Join(before, ",") {
			t.Fatalf("the refused request left files: %q, before %q", after, before)
		}
	}
	small := part{"ok.txt", "", []byte("fine")}
	for _, tc := range []struct {
		name     string
		files    []part
		wantCode int
		says     string
	}{
		{"climbing name", []part{small, {"../../x", "", []byte("x")}}, 400, `the name \"../../x\" has a folder separator`},
		{"git", []part{small, {".git", "", []byte("x")}}, 400, `the name \".git\" starts with a dot`},
		{"claude.md", []part{small, {"CLAUDE.md", "", []byte("x")}}, 400, "configures the assistant or git"},
		{"separator", []part{small, {"a/b", "", []byte("x")}}, 400, "folder separator"},
		{"nul", []part{small, {"*=UTF-8''a%00b", "", []byte("x")}}, 400, `the name \"a\\x00b\" has a control character`},
		{"raw nul", []part{small, {"a\x00b", "", []byte("x")}}, 400, "malformed header, such as a file name with a control character"},
		{"oversize", []part{small, {"big.txt", "", bytes.Repeat([]byte("x"), 1<<20+1)}}, 413, "more than the 1 MiB one file may have"},
		{"too many", []part{small, small, small, small}, 413, "at most 3 files"},
		{"lying type", []part{small, {"cat.png", "image/png", []byte("<svg xmlns='http://www.w3.org/2000/svg'><script>alert(1)</script></svg>")}}, 400,
			`sent as image/png, but its content is image/svg+xml`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctype, body := multipartBody(t, map[string]string{"message": "[[say should not run]]", "session_id": id}, tc.files...)
			code, out := s.post(t, "sebastian", "/api/claude/sessions/"+id+"/messages", ctype, body)
			refused(t, code, out, tc.wantCode, tc.says)
		})
	}
	t.Run("unknown upload", func(t *testing.T) {
		code, out := s.post(t, "sebastian", "/api/claude/chat", "application/json",
			[]byte(`{"message":"[[say no]]","attachments":["att_0123"]}`))
		refused(t, code, out, 400, `unknown attachment \"att_0123\"`)
	})
	t.Run("cut off halfway", func(t *testing.T) {
		ctype, body := multipartBody(t, map[string]string{"message": "[[say should not run]]"},
			small, part{"photo.png", "image/png", testPNG(t, 200, 200)})
		conn, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "POST /api/claude/sessions/%s/messages HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nX-Notes-Person: sebastian\r\n"+
			"Content-Type: %s\r\nContent-Length: %d\r\n\r\n", id, testToken, ctype, len(body))
		_, _ = conn.Write(body[:len(body)*2/3])
		_ = conn.(*net.TCPConn).CloseWrite()
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		resp, _ := io.ReadAll(conn)
		head, rest, _ := strings.Cut(string(resp), "\r\n")
		refused(t, map[bool]int{true: 400}[strings.Contains(head, " 400 ")], rest, 400, "cut off")
	})
	if msgs := userTurns(t, s, id); msgs != 1 {
		t.Fatalf("a refused message reached the session: %d turns", msgs)
	}

	step("attached notes inside the folder reach the model; others are refused", func(t *testing.T) {
		if err := os.MkdirAll(filepath.Join(s.env.Vault("sebastian"), "plans"), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(s.env.Vault("sebastian"), "plans", "trip.md"), "Fly to Lisbon on Friday\n")
		writeFile(t, filepath.Join(s.env.Vault("petra"), "secret.md"), "petra's secret\n")
		code, out := s.post(t, "sebastian", "/api/claude/chat", "application/x-www-form-urlencoded",
			[]byte("session_id="+id+"&attach=plans/trip.md&message=%5B%5Bblocks%5D%5D"))
		if code != 200 || !strings.Contains(out, "text [Attached note plans/trip.md: the person attached this note") ||
			!strings.Contains(out, "Fly to Lisbon on Friday [end of note plans/trip.md] | text [[blocks]]") {
			t.Fatalf("attached note: %d %s", code, out)
		}
		for _, p := range []string{"../petra/secret.md", filepath.Join(s.env.Vault("petra"), "secret.md"), "CLAUDE.md"} {
			body, _ := json.Marshal(map[string]any{"session_id": id, "message": "[[blocks]]", "attach": []string{p}})
			code, out := s.post(t, "sebastian", "/api/claude/chat", "application/json", body)
			if code != 403 || !strings.Contains(out, p) && !strings.Contains(out, "[server path]") || strings.Contains(out, "petra's secret") {
				t.Fatalf("attach %q: %d %s", p, code, out)
			}
		}
	})
}

// userTurns counts the person's messages in a session's rich history.
func userTurns(tb testing.TB, s *server, id string) int {
	tb.Helper()
	_, msgs := apiClient(s).Call(tb, "GET", "/api/claude/sessions/"+id+"/messages", "sebastian", nil)
	n := 0
	for _, m := range msgs["messages"].([]any) {
		if m.(map[string]any)["role"] == "user" {
			n++
		}
	}
	return n
}

// gitOut runs git in dir and returns its output, trimmed.
func gitOut(tb testing.TB, dir string, args ...string) string {
	tb.Helper()
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput()
	if err != nil {
		tb.Fatalf("git %v: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}
