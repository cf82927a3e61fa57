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
		status := gitIn(t, s.env.VaultRoot, "status", "--porcelain", "--", "sebastian/")
		logged := gitIn(t, s.env.VaultRoot, "log", "--format=%s%n%b", "--name-only", "-1")
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

// TestNotesHistoryAndChangesThroughCLI runs, through the whole server and
// the sandboxed real CLI:
//   - a session made with an imported history: the model answers its
//     first message knowing it, both histories show it first (marked
//     imported in the rich one), and a malformed one is 400 naming the
//     entry;
//   - the notes of two persons: each lists and reads only their own
//     (another's is 403, a protected name 404), a file has an ETag (304
//     when it is unchanged), and every file is sent so that it cannot run
//     in the client's origin (nosniff, a sandboxing CSP, HTML and SVG as
//     downloads);
//   - two turns that write notes: the changes list names each turn's
//     files and commit, a turn's diff shows its lines, and an undo (the
//     rewind of the second turn) restores the note and is not taken for
//     the next turn's change.
func TestNotesHistoryAndChangesThroughCLI(t *testing.T) {
	t.Parallel()
	s := start(t)
	c := apiClient(s)
	step := func(name string, f func(t *testing.T)) {
		if !t.Run(name, f) {
			t.FailNow()
		}
	}
	var id string
	step("an imported history is the model's context", func(t *testing.T) {
		code, out := s.post(t, "sebastian", "/api/claude/sessions", "application/json",
			[]byte(`{"history":[{"role":"user","content":"My cat is called Tiger."},{"role":"user","content":"x"},{"role":"robot","content":"beep"}]}`))
		if code != 400 || !strings.Contains(out, `history[2]: role must be \"user\" or \"assistant\"`) {
			t.Fatalf("malformed history: %d %s", code, out)
		}
		code, out = s.post(t, "sebastian", "/api/claude/sessions", "application/json",
			[]byte(`{"history":[{"role":"user","content":"My cat is called Tiger."},{"role":"assistant","content":"What a fine name."}]}`))
		var created struct{ ID string }
		if err := json.Unmarshal([]byte(out), &created); err != nil || code != http.StatusCreated {
			t.Fatalf("create: %d %s", code, out)
		}
		id = created.ID
		reply := s.chatIn(t, "sebastian", id, "What is my cat called? [[recall]]")
		if !strings.Contains(reply, "Person: My cat is called Tiger.") || !strings.Contains(reply, "Assistant: What a fine name.") ||
			!strings.HasSuffix(reply, "| What is my cat called? [[recall]]") {
			t.Fatalf("the model answered %q", reply)
		}
		// Only the first message carries it.
		if reply := s.chatIn(t, "sebastian", id, "[[recall]]"); strings.Count(reply, "Tiger") != 1 {
			t.Fatalf("the second turn's model saw %q", reply)
		}
		_, hist := c.Call(t, "GET", "/api/claude/history?session_id="+id, "sebastian", nil)
		msgs := hist["messages"].([]any)
		if len(msgs) != 6 || msgs[0].(map[string]any)["content"] != "My cat is called Tiger." || msgs[1].(map[string]any)["role"] != "assistant" {
			t.Fatalf("compat history: %v", msgs)
		}
		_, rich := c.Call(t, "GET", "/api/claude/sessions/"+id+"/messages", "sebastian", nil)
		first := rich["messages"].([]any)[0].(map[string]any)
		if first["imported"] != true || first["id"] != "imported-1" || rich["messages"].([]any)[2].(map[string]any)["id"] != "turn-1-user" {
			t.Fatalf("rich history: %v", rich["messages"])
		}
	})

	step("each person reads only their own notes", func(t *testing.T) {
		writeFile(t, filepath.Join(s.env.Vault("sebastian"), "todo.md"), "- call mum\n")
		writeFile(t, filepath.Join(s.env.Vault("sebastian"), "page.html"), "<script>parent.document.title='pwned'</script>")
		writeFile(t, filepath.Join(s.env.Vault("sebastian"), "CLAUDE.md"), "secret instructions")
		writeFile(t, filepath.Join(s.env.Vault("petra"), "diary.md"), "petra's diary")
		// Committed by hand, so the turns' commits below are their own.
		gitIn(t, s.env.VaultRoot, "add", "-A")
		gitIn(t, s.env.VaultRoot, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "notes written by hand")
		tree := func(person, path string) (int, string) {
			resp := s.get(t, person, "/api/claude/vault/tree?path="+path)
			return resp.StatusCode, readAll(t, resp)
		}
		if code, out := tree("sebastian", ""); code != 200 || !strings.Contains(out, `"name":"todo.md","type":"file","size":11`) ||
			strings.Contains(out, "CLAUDE.md") || strings.Contains(out, "diary") {
			t.Fatalf("sebastian's tree: %d %s", code, out)
		}
		if code, out := tree("petra", "."); code != 200 || !strings.Contains(out, "diary.md") || strings.Contains(out, "todo.md") {
			t.Fatalf("petra's tree: %d %s", code, out)
		}
		if code, out := tree("petra", "../sebastian"); code != 403 || !strings.Contains(out, "outside your folder") {
			t.Fatalf("petra listing sebastian's folder: %d %s", code, out)
		}
		resp := s.get(t, "sebastian", "/api/claude/vault/file?path=todo.md")
		body, etag := readAll(t, resp), resp.Header.Get("ETag")
		if resp.StatusCode != 200 || body != "- call mum\n" || etag == "" || resp.Header.Get("Content-Type") != "text/markdown; charset=utf-8" {
			t.Fatalf("file: %d %q %q %v", resp.StatusCode, body, etag, resp.Header)
		}
		if resp := s.get(t, "sebastian", "/api/claude/vault/file?path=todo.md", "If-None-Match", etag); resp.StatusCode != 304 {
			t.Fatalf("unchanged file: %d", resp.StatusCode)
		}
		for _, tc := range []struct {
			person, path string
			code         int
		}{
			{"petra", "../sebastian/todo.md", 403},
			{"sebastian", "../petra/diary.md", 403},
			{"sebastian", "CLAUDE.md", 404},
			{"sebastian", "missing.md", 404},
		} {
			resp := s.get(t, tc.person, "/api/claude/vault/file?path="+tc.path)
			if out := readAll(t, resp); resp.StatusCode != tc.code || strings.Contains(out, "petra's diary") || strings.Contains(out, "secret instructions") {
				t.Fatalf("%s reading %s: %d %s", tc.person, tc.path, resp.StatusCode, out)
			}
		}
		for path, disposition := range map[string]string{"todo.md": "inline", "page.html": "attachment"} {
			h := s.get(t, "sebastian", "/api/claude/vault/file?path="+path).Header
			if h.Get("X-Content-Type-Options") != "nosniff" || !strings.HasPrefix(h.Get("Content-Security-Policy"), "sandbox") ||
				!strings.HasPrefix(h.Get("Content-Disposition"), disposition) {
				t.Fatalf("%s is served with %v", path, h)
			}
		}
	})

	note := filepath.Join(s.env.Vault("sebastian"), "notes", "shopping.md")
	step("each turn's changes and diff", func(t *testing.T) {
		turn(t, s, id, `[[tool Write {"file_path":"`+note+`","content":"milk\n"}]]`)
		turn(t, s, id, `[[tool Write {"file_path":"`+note+`","content":"milk\neggs\n"}]]`)
		_, ch := c.Call(t, "GET", "/api/claude/sessions/"+id+"/changes", "sebastian", nil)
		turns := ch["turns"].([]any)
		if len(turns) != 2 {
			t.Fatalf("changes: %v", ch)
		}
		for i, want := range []struct {
			turn   float64
			status string
			ins    float64
		}{{3, "added", 1}, {4, "modified", 1}} {
			tc := turns[i].(map[string]any)
			f := tc["files"].([]any)[0].(map[string]any)
			if tc["turn"] != want.turn || tc["message_id"] != fmt.Sprintf("turn-%d-user", int(want.turn)) || len(tc["commit"].(string)) != 40 ||
				f["path"] != "notes/shopping.md" || f["status"] != want.status || f["insertions"] != want.ins {
				t.Fatalf("turn %d changes: %v", i, tc)
			}
		}
		code, diff := c.Call(t, "GET", "/api/claude/sessions/"+id+"/changes/4", "sebastian", nil)
		if code != 200 || !strings.Contains(diff["diff"].(string), "--- a/notes/shopping.md\n+++ b/notes/shopping.md") ||
			!strings.Contains(diff["diff"].(string), "+eggs") {
			t.Fatalf("diff: %d %v", code, diff)
		}
		if code, out := c.Call(t, "GET", "/api/claude/sessions/"+id+"/changes/2", "sebastian", nil); code != 404 {
			t.Fatalf("a turn without changes: %d %v", code, out)
		}
		if resp := s.get(t, "petra", "/api/claude/sessions/"+id+"/changes/4"); resp.StatusCode != 404 {
			t.Fatalf("another person's session: %d", resp.StatusCode)
		}
	})

	step("an undo from the diff restores the note", func(t *testing.T) {
		code, dry := c.Call(t, "POST", "/api/claude/sessions/"+id+"/rewind", "sebastian", map[string]any{"message_id": "turn-4-user", "dry_run": true})
		if files, _ := json.Marshal(dry["files"]); code != 200 || string(files) != `["notes/shopping.md"]` {
			t.Fatalf("dry run: %d %v", code, dry)
		}
		if code, done := c.Call(t, "POST", "/api/claude/sessions/"+id+"/rewind", "sebastian", map[string]any{"message_id": "turn-4-user"}); code != 200 {
			t.Fatalf("undo: %d %v", code, done)
		}
		if b, _ := os.ReadFile(note); string(b) != "milk\n" {
			t.Fatalf("after the undo the note is %q", b)
		}
		// The undo's commit is not the next turn's change.
		s.chatIn(t, "sebastian", id, "[[say thanks]]")
		_, ch := c.Call(t, "GET", "/api/claude/sessions/"+id+"/changes", "sebastian", nil)
		if turns := ch["turns"].([]any); len(turns) != 2 {
			t.Fatalf("changes after the undo: %v", turns)
		}
	})
}
