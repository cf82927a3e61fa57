package hooks_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/hooks"
	"github.com/majorhq/major/supervisor"
	"github.com/majorhq/major/vault"
)

func TestLogEntry(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 18, 14, 32, 15, 999, time.FixedZone("CET", 3600))
	long := strings.Repeat("a", 3000) + "é"
	cases := []struct {
		name, person, text, want string
	}{
		{"plain url", "sebastian", "https://example.com/page",
			"- [2026-01-18 14:32:15] (sebastian) https://example.com/page\n"},
		{"newline cannot start a new entry", "petra", "https://x.test/a\n- [2026-01-01 00:00:00] (sebastian) https://forged",
			`- [2026-01-18 14:32:15] (petra) https://x.test/a\n- \[2026-01-01 00:00:00\] (sebastian) https://forged` + "\n"},
		{"carriage return and tab", "petra", "a\rb\tc",
			`- [2026-01-18 14:32:15] (petra) a\rb\tc` + "\n"},
		{"markdown link, image, code and html", "petra", "[click](https://evil) ![i](x) `rm` <script>",
			"- [2026-01-18 14:32:15] (petra) \\[click\\](https://evil) !\\[i\\](x) \\`rm\\` \\<script\\>\n"},
		{"unicode line separators and bidi override", "petra", "a\u2028b\u0085c\u202Ed",
			`- [2026-01-18 14:32:15] (petra) a\u2028b\u0085c\u202Ed` + "\n"},
		{"invalid utf-8", "petra", "a\xffb", "- [2026-01-18 14:32:15] (petra) a\uFFFDb\n"},
		{"empty", "petra", "  ", "- [2026-01-18 14:32:15] (petra) (empty)\n"},
		{"oversized", "petra", long,
			"- [2026-01-18 14:32:15] (petra) " + strings.Repeat("a", 2048) + " …(truncated, 954 more bytes)\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := hooks.LogEntry(at, tc.person, tc.text)
			if got != tc.want {
				t.Fatalf("\n got %q\nwant %q", got, tc.want)
			}
			if strings.Count(got, "\n") != 1 || !strings.HasSuffix(got, "\n") {
				t.Fatalf("entry is not exactly one line: %q", got)
			}
		})
	}
}

func hookRequest(tb testing.TB, id, tool string, input any) *supervisor.ControlRequest {
	tb.Helper()
	in, err := json.Marshal(map[string]any{
		"session_id": "cli-1", "cwd": "", "hook_event_name": "PreToolUse",
		"tool_name": tool, "tool_input": input, "tool_use_id": "toolu_1",
	})
	if err != nil {
		tb.Fatal(err)
	}
	return &supervisor.ControlRequest{Subtype: "hook_callback", CallbackID: id, HookInput: in}
}

func TestHandleRecordsWithTheClockAndSurvivesGitFailure(t *testing.T) {
	t.Parallel()
	root := newRepo(t)
	// git missing: nothing can be committed, yet the tool call goes on and
	// the session hears about it.
	g := newGitSync(t, vault.GitConfig{Root: root, Git: filepath.Join(t.TempDir(), "no-git")})
	h := hooks.New(hooks.Config{
		VaultRoot: root, Git: g,
		Clock:  func() time.Time { return time.Date(2026, 1, 18, 14, 32, 15, 0, time.UTC) },
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.Disabled),
	})
	c := newCaller("s1", "sebastian")
	out, err := h.Handle(context.Background(), c, hookRequest(t, hooks.CallbackWebSearchLog, "WebSearch", map[string]any{"query": "go\nrace"}))
	if err != nil || string(out) != `{"continue":true}` {
		t.Fatalf("answer = %s, %v", out, err)
	}
	if got := readFile(t, filepath.Join(root, hooks.WebSearchLogPath)); got != `- [2026-01-18 14:32:15] (sebastian) go\nrace`+"\n" {
		t.Fatalf("log = %q", got)
	}
	select {
	case n := <-c.notices:
		if !strings.Contains(n, "WebSearch") {
			t.Fatalf("notice = %q", n)
		}
	default:
		t.Fatal("no notice for the failed sync")
	}
}

func TestHandleUnknownCallbackIsAnError(t *testing.T) {
	t.Parallel()
	h := hooks.New(hooks.Config{VaultRoot: t.TempDir()})
	if _, err := h.Handle(context.Background(), newCaller("s", "sebastian"), hookRequest(t, "nope", "Read", map[string]any{})); err == nil {
		t.Fatal("want an error for an unknown callback id")
	}
}
