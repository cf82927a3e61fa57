package hooks

import (
	"fmt"
	"net/url"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/majorhq/major/vault"
)

// The web audit logs, relative to the vault root. They live in
// vault.AuditDir, outside every person's folder, so the model (confined by
// the vault guard) cannot edit them.
const (
	WebFetchLogPath  = vault.AuditDir + "/webfetch_logs/requests.md"
	WebSearchLogPath = vault.AuditDir + "/websearch_logs/queries.md"
)

// maxLoggedBytes bounds one logged URL or query: the log is read by people,
// and a megabyte "URL" must not make every later entry hard to find.
const maxLoggedBytes = 2048

// timestampLayout is the log's "[2026-01-18 14:32:15]".
const timestampLayout = "2006-01-02 15:04:05"

// LogEntry returns one audit log line, newline included:
// "- [YYYY-MM-DD HH:MM:SS] (person) text". Person and text are made safe
// to sit inside one markdown list item (see SafeText).
func LogEntry(at time.Time, person, text string) string {
	return fmt.Sprintf("- [%s] (%s) %s\n", at.Format(timestampLayout), SafeText(person, 64), SafeText(text, maxLoggedBytes))
}

// webFetchText is what the log shows for a fetched URL: the URL, flagged
// when it is not an absolute http(s) URL, so an odd request is still on
// record but stands out.
func webFetchText(raw string) string {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "(not an http(s) URL) " + raw
	}
	return raw
}

// SafeText makes s safe for one markdown list item: invalid UTF-8 is
// replaced, line breaks and other control characters are written as
// visible escapes (\n, \r, \t, \u0085, ...), the markdown characters that could form a
// link, an image, code or HTML (\ ` [ ] < >) are backslash-escaped, and text
// over limit bytes is cut on a character boundary with a marker saying how
// much was dropped. Empty text is shown as "(empty)".
func SafeText(s string, limit int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	dropped := 0
	if len(s) > limit {
		cut := limit
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		dropped = len(s) - cut
		s = s[:cut]
	}
	if strings.TrimSpace(s) == "" {
		s = "(empty)"
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case unicode.IsControl(r) || r == '\u2028' || r == '\u2029' || unicode.Is(unicode.Cf, r):
			// C0/C1 controls, line/paragraph separators and invisible
			// format characters (bidi overrides) could break or disguise
			// the line.
			fmt.Fprintf(&b, `\u%04X`, r)
		case strings.ContainsRune("\\`[]<>", r):
			b.WriteByte('\\')
			b.WriteRune(r)
		default:
			b.WriteRune(r)
		}
	}
	if dropped > 0 {
		fmt.Fprintf(&b, " …(truncated, %d more bytes)", dropped)
	}
	return b.String()
}
