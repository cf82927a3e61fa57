package clientevent_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/majorhq/major/clientevent"
)

// paths is a server laid out as in production: the vault, the state and
// configuration directories, the CLI's home and install folder.
var paths = clientevent.ServerPaths{
	VaultRoot: "/srv/notes",
	Hidden:    []string{"/var/lib/major", "/etc/major", "/opt/claude/bin", "/tmp", "/"},
	Home:      "/home/major",
}

// A path in the person's folder is shown relative to it; every other
// path of the server's is replaced whole, in JSON and in text alike; a
// path that only looks like one (a longer name, a URL's path, a relative
// path) is left alone.
func TestRedactorTakesOutServerPaths(t *testing.T) {
	r := paths.Redactor("sebastian")
	for _, c := range []struct{ name, in, want string }{
		{"a note", `/srv/notes/sebastian/notes/x.md`, `notes/x.md`},
		{"the folder", `/srv/notes/sebastian`, `.`},
		{"the folder with a slash", `/srv/notes/sebastian/`, `./`},
		{"another person", `/srv/notes/petra/x.md`, `[server path]`},
		{"the vault's own folder", `/srv/notes/claude/webfetch_logs/requests.md`, `[server path]`},
		{"the vault root", `cd /srv/notes and look`, `cd [server path] and look`},
		{"a longer name", `/srv/notes/sebastian2/x.md`, `[server path]`},
		{"the state directory", `Base directory for this skill: /var/lib/major/session-config/skills/ab/major`, `Base directory for this skill: [server path]`},
		{"a temp file", `socket /tmp/cc-socks/1.sock.`, `socket [server path]`},
		{"the CLI's home", `/home/major/.claude/projects/-srv-notes-sebastian/x.jsonl`, `[server path]`},
		{"the home written with ~", `see ~/.claude/settings.json`, `see [server path]`},
		{"a file URL", `file:///tmp/x.html`, `file://[server path]`},
		{"quoted", `"/etc/major/persons/sebastian/mcp.json" is broken`, `"[server path]" is broken`},
		{"in parentheses", `(/opt/claude/bin/claude)`, `([server path])`},
		{"not a root: longer name", `/tmpfiles/x and /etc/majority`, `/tmpfiles/x and /etc/majority`},
		{"not a root: a URL's path", `https://example.com/tmp/x and https://example.com/srv/notes/sebastian`, `https://example.com/tmp/x and https://example.com/srv/notes/sebastian`},
		{"not a root: relative", `notes/x.md and ../petra/x.md and srv/notes`, `notes/x.md and ../petra/x.md and srv/notes`},
		{"not a root: / alone", `a / b and /usr/bin/git`, `a / b and /usr/bin/git`},
		{"a tilde that is no path", `~5 minutes, ~user`, `~5 minutes, ~user`},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := r.Text(c.in); got != c.want {
				t.Errorf("Text(%q) = %q, want %q", c.in, got, c.want)
			}
			// The same inside JSON, where quotes and line ends are escaped.
			in, _ := clientevent.Marshal(map[string]string{"k": "\n" + c.in + "\n"})
			want, _ := clientevent.Marshal(map[string]string{"k": "\n" + c.want + "\n"})
			if got := r.JSON(in); string(got) != string(want) {
				t.Errorf("JSON(%s) = %s, want %s", in, got, want)
			}
		})
	}
}

// Another person's redactor shows their folder, not sebastian's; one for
// no person hides every folder.
func TestRedactorIsPerPerson(t *testing.T) {
	const in = `/srv/notes/sebastian/a.md /srv/notes/petra/b.md`
	for person, want := range map[string]string{
		"petra":     `[server path] b.md`,
		"sebastian": `a.md [server path]`,
		"":          `[server path] [server path]`,
		"..":        `[server path] [server path]`,
	} {
		if got := paths.Redactor(person).Text(in); got != want {
			t.Errorf("for %q: %q, want %q", person, got, want)
		}
	}
}

// A root that is a symbolic link is hidden under both of its names: the
// CLI names folders as it resolved them.
func TestRedactorKnowsResolvedPaths(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real-state")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "state")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	r := clientevent.ServerPaths{Hidden: []string{link}}.Redactor("sebastian")
	for _, p := range []string{link + "/x", real + "/x"} {
		if got := r.Text("at " + p); got != "at [server path]" {
			t.Errorf("%s: %q", p, got)
		}
	}
}

// An event without a server path comes back as it is, without a copy.
func TestRedactorLeavesCleanEventsAlone(t *testing.T) {
	r := paths.Redactor("sebastian")
	body := []byte(`{"type":"cli","event":{"type":"stream_event","event":{"delta":{"type":"text_delta","text":"see https://example.com/a and/or b"}}}}`)
	if allocs := testing.AllocsPerRun(100, func() { r.JSON(body) }); allocs != 0 {
		t.Fatalf("%v allocations for a clean event", allocs)
	}
	if got := r.JSON(body); &got[0] != &body[0] {
		t.Fatal("a clean event was copied")
	}
	var none *clientevent.Redactor
	if got := none.Text("/srv/notes/x"); got != "/srv/notes/x" {
		t.Fatalf("no redactor changed the text: %q", got)
	}
}

// A text streamed in pieces of a few bytes, as the model streams tokens,
// comes out with its paths taken out as if it had come whole: text that
// may start a path waits for the next delta, and the cli event of each
// delta carries the same text as its text event.
func TestTextHoldKeepsPathsWhole(t *testing.T) {
	const text = "The skill is in /var/lib/major/session-config/skills/x, your note is /srv/notes/sebastian/notes/a.md " +
		"and ~/.claude/x is mine; see https://example.com/tmp/y and/or /srv/notes/sebastian"
	r := paths.Redactor("sebastian")
	want := r.Text(text)
	for _, size := range []int{1, 2, 3, 5, 7, 16, len(text)} {
		t.Run("pieces of "+strconv.Itoa(size), func(t *testing.T) {
			h := clientevent.NewTextHold(r)
			var texts, deltas strings.Builder
			for i := 0; i < len(text); i += size {
				piece := text[i:min(i+size, len(text))]
				raw, _ := json.Marshal(map[string]any{"type": "stream_event", "event": map[string]any{
					"type": "content_block_delta", "delta": map[string]any{"type": "text_delta", "text": piece}}})
				outs := h.Apply([]clientevent.Out{
					{Body: clientevent.CLI{Type: "cli", Event: raw}},
					{Body: clientevent.Text{Type: "text", Delta: piece}},
				})
				for _, o := range outs {
					body, _ := clientevent.Marshal(o.Body)
					body = r.JSON(body)
					var ev struct {
						Delta string
						Event struct {
							Event struct{ Delta struct{ Text string } }
						}
					}
					if err := json.Unmarshal(body, &ev); err != nil {
						t.Fatal(err)
					}
					switch o.Body.(type) {
					case clientevent.Text:
						texts.WriteString(ev.Delta)
					case clientevent.CLI:
						deltas.WriteString(ev.Event.Event.Delta.Text)
					}
				}
			}
			rest, _ := h.Flush()
			texts.WriteString(r.Text(rest.Delta))
			if texts.String() != want {
				t.Errorf("text events:\n%q\nwant\n%q", texts.String(), want)
			}
			// The cli deltas add up to the text but for what the end held.
			if got := deltas.String() + r.Text(rest.Delta); got != want {
				t.Errorf("cli deltas:\n%q\nwant\n%q", got, want)
			}
		})
	}
}
