package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/relay"
	"github.com/majorhq/major/relay/relaytest"
	"github.com/majorhq/major/supervisor"
	"github.com/majorhq/major/vault"
)

// decoders are every request body the API decodes, each with its check.
var decoders = []struct {
	name     string
	new      func() formDecoder
	validate func(formDecoder) error
}{
	{"chat", func() formDecoder { return &chatRequest{} }, func(v formDecoder) error { return v.(*chatRequest).validate() }},
	{"clear", func() formDecoder { return &clearRequest{} }, nil},
	{"answer", func() formDecoder { return &answerRequest{} }, func(v formDecoder) error { return v.(*answerRequest).validate() }},
	{"permission", func() formDecoder { return &permissionRequest{} }, func(v formDecoder) error { return v.(*permissionRequest).validate() }},
	{"empty", func() formDecoder { return &emptyRequest{} }, nil},
}

// clientError fails tb unless err is an *apiError with a 4xx status.
func clientError(tb testing.TB, what string, err error) *apiError {
	tb.Helper()
	var ae *apiError
	if !errors.As(err, &ae) {
		tb.Fatalf("%s: error %T %v is not an apiError", what, err, err)
	}
	if ae.status < 400 || ae.status > 499 {
		tb.Fatalf("%s: status %d for %q", what, ae.status, ae.msg)
	}
	if ae.msg == "" {
		tb.Fatalf("%s: empty message", what)
	}
	return ae
}

func FuzzDecodeBody(f *testing.F) {
	ctypes := []string{
		"application/json", "application/x-www-form-urlencoded", "", "text/plain",
		"application/json; charset=utf-8", "application/vnd.major+json", "multipart/form-data; boundary=x",
		"application/x-www-form-urlencoded; charset=UTF-8", ";;;", "application/json; q=\"",
	}
	bodies := []string{
		`{"message":"hello","session_id":"s1","interactive":true}`,
		`message=hello&session_id=s1&interactive=true`, `message=%zz`, `interactive=maybe`,
		`{"request_id":"r","answers":{"Which color?":"Blue"}}`,
		`request_id=r&answers=%7B%22Q%22%3A%22A%22%7D`, `request_id=r&answers=notjson`,
		`{"request_id":"r","behavior":"allow","message":"","remember":true}`, `behavior=deny&request_id=r`,
		``, ` `, `{}`, `{} {}`, `[]`, `null`, `{"message":5}`, `{"answers":[]}`, `{`, "\xff\xfe",
		`{"message":"` + strings.Repeat("x", 300) + `"}`,
	}
	for i, b := range bodies {
		f.Add(ctypes[i%len(ctypes)], []byte(b), uint16(512))
		f.Add(ctypes[(i+3)%len(ctypes)], []byte(b), uint16(16))
	}
	f.Fuzz(func(t *testing.T, ctype string, body []byte, limitSeed uint16) {
		limit := int64(limitSeed%2048) + 1
		for _, d := range decoders {
			r := httptest.NewRequest(http.MethodPost, "/x", bytes.NewReader(body))
			r.Header.Set("Content-Type", ctype)
			v := d.new()
			err := decodeBody(r, limit, v)
			if err != nil {
				ae := clientError(t, d.name, err)
				if (ae.status == http.StatusRequestEntityTooLarge) != (int64(len(body)) > limit) {
					t.Fatalf("%s: status %d for a body of %d bytes, limit %d", d.name, ae.status, len(body), limit)
				}
				continue
			}
			if int64(len(body)) > limit {
				t.Fatalf("%s: accepted %d bytes over the %d limit", d.name, len(body), limit)
			}
			if d.validate != nil {
				if err := d.validate(v); err != nil {
					clientError(t, d.name+" validate", err)
				}
			}
		}
	})
}

// FuzzChatEncodings checks that the JSON and the form encoding of the same
// chat request decode to the same request: the existing clients send both.
func FuzzChatEncodings(f *testing.F) {
	f.Add("hello", "", false)
	f.Add("a&b=c%20d+e", "3f1c-uuid", true)
	f.Add("  multi\nline\r\n ", "ü/?#", false)
	f.Add("", "x", true)
	f.Fuzz(func(t *testing.T, message, sessionID string, interactive bool) {
		if !utf8.ValidString(message) || !utf8.ValidString(sessionID) {
			return // JSON cannot carry invalid UTF-8 unchanged
		}
		want := chatRequest{Message: message, SessionID: sessionID, Interactive: interactive}
		js, _ := json.Marshal(want)
		form := url.Values{"message": {message}, "session_id": {sessionID}, "interactive": {strconv.FormatBool(interactive)}}.Encode()
		for _, enc := range []struct{ ctype, body string }{
			{"application/json", string(js)},
			{"application/x-www-form-urlencoded", form},
		} {
			r := httptest.NewRequest(http.MethodPost, "/x", strings.NewReader(enc.body))
			r.Header.Set("Content-Type", enc.ctype)
			var got chatRequest
			if err := decodeBody(r, DefaultMaxBody, &got); err != nil {
				t.Fatalf("%s: %v", enc.ctype, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: decoded %+v, want %+v", enc.ctype, got, want)
			}
			// With no content type the server sniffs the encoding.
			r = httptest.NewRequest(http.MethodPost, "/x", strings.NewReader(enc.body))
			got = chatRequest{}
			if err := decodeBody(r, DefaultMaxBody, &got); err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("%s sniffed: %+v, %v; want %+v", enc.ctype, got, err, want)
			}
		}
	})
}

func FuzzTypeFilter(f *testing.F) {
	for _, s := range []string{"", " ", "text", "text,done", " text , done ,", ",", "cli,turn_start", "Text", "a b", "x;y", "text,,", "-x", "\xff"} {
		f.Add(s, "text")
		f.Add(s, "turn_start")
	}
	f.Fuzz(func(t *testing.T, spec, typ string) {
		filter, err := typeFilter(spec)
		if err != nil {
			if clientError(t, "typeFilter", err).status != http.StatusBadRequest {
				t.Fatal("not 400")
			}
			return
		}
		want := strings.TrimSpace(spec) == ""
		named := 0
		for _, name := range strings.Split(spec, ",") {
			if name = strings.TrimSpace(name); name != "" {
				if !vault.ValidPerson(strings.ReplaceAll(name, "_", "-")) {
					t.Fatalf("accepted type %q", name)
				}
				named++
				want = want || name == typ
			}
		}
		if named == 0 && strings.TrimSpace(spec) != "" {
			t.Fatalf("types=%q names no type but was accepted", spec)
		}
		if got := filter(&relay.Event{Type: typ}); got != want {
			t.Fatalf("types=%q: filter(%q) = %v, want %v", spec, typ, got, want)
		}
	})
}

// FuzzEventsQuery sends ?after= and ?types= through the real router: a
// valid query attaches (200, replay of the events after it), anything else
// is a 400 with a JSON error; never a 5xx or a panic.
func FuzzEventsQuery(f *testing.F) {
	for _, s := range []string{"", "0", "1", "2", "3", "-1", "+1", "01", "1e3", "9223372036854775807", "9223372036854775808", " 1", "x", "0x10"} {
		f.Add(s, "")
		f.Add(s, "text,done")
	}
	f.Add("0", ",")
	f.Add("0", "bad type")

	// The fake CLI runs no turn here; the events are published directly.
	sessions, _ := relaytest.NewRegistry(f, relay.RegistryConfig{})
	auth, err := NewAuth(map[string][]string{"tok": {"sebastian"}})
	if err != nil {
		f.Fatal(err)
	}
	done := make(chan struct{})
	close(done) // streams end right after the replay
	srv := NewServer(Config{Auth: auth, Registry: sessions, Logger: zerolog.Nop(), Done: done})
	chat, _ := sessions.GetOrCreate("", "sebastian")
	chat.Publish(supervisor.Event{Kind: supervisor.EventTurnStart, Text: "hi"})
	chat.Publish(supervisor.Event{Kind: supervisor.EventTurnEnd})
	last := chat.Stream().Seq() // turn_start, done

	f.Fuzz(func(t *testing.T, after, types string) {
		q := url.Values{}
		if after != "" {
			q.Set("after", after)
		}
		if types != "" {
			q.Set("types", types)
		}
		r := httptest.NewRequest(http.MethodGet, "/api/claude/sessions/"+chat.ID+"/events?"+q.Encode(), nil)
		r.Header.Set("Authorization", "Bearer tok")
		r.Header.Set("X-Notes-Person", "sebastian")
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, r)

		n, perr := strconv.ParseInt(after, 10, 64)
		validAfter := after == "" || (perr == nil && n >= 0)
		_, ferr := typeFilter(types)
		switch {
		case validAfter && ferr == nil:
			if w.Code != http.StatusOK {
				t.Fatalf("after=%q types=%q: %d %s", after, types, w.Code, w.Body)
			}
			filter, _ := typeFilter(types)
			want := 0
			for _, ev := range chat.Stream().Events(n) {
				if filter(ev) {
					want++
				}
			}
			if got := bytes.Count(w.Body.Bytes(), []byte("\n")); got != want {
				t.Fatalf("after=%q types=%q: %d lines, want %d (of %d events)", after, types, got, want, last)
			}
		default:
			if w.Code != http.StatusBadRequest {
				t.Fatalf("after=%q types=%q: status %d, want 400", after, types, w.Code)
			}
			var e struct {
				Error string `json:"error"`
			}
			if json.Unmarshal(w.Body.Bytes(), &e) != nil || e.Error == "" {
				t.Fatalf("error body %q", w.Body)
			}
		}
	})
}
