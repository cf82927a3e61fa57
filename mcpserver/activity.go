package mcpserver

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/majorhq/major/vault"
)

// Appender appends one entry to an audit log in the vault and records it in
// git; *vault.AuditLog implements it.
type Appender interface {
	Append(ctx context.Context, e vault.Entry) error
}

var _ Appender = (*vault.AuditLog)(nil)

// activityLog writes each LinkedIn action to the person's log under the
// vault's audit folder (ActivityLogPath) through an Appender, which commits
// every entry on its own.
type activityLog struct {
	log     Appender
	now     func() time.Time
	timeout time.Duration
}

// entry is one action: what was done, the URN it produced, what it was done
// on (a post or parent comment; empty for a post) and the text.
type entry struct {
	action string
	urn    string
	target string
	text   string
}

// ActivityLogPath is where person's LinkedIn activity log lives, relative
// to the vault root (slash-separated): in the server's audit folder, which
// no person may be named after, so no file tool of any person can rewrite
// or delete it.
func ActivityLogPath(person string) string {
	return vault.AuditDir + "/linkedin_logs/" + person + ".md"
}

const activityHeader = "# LinkedIn activity\n\nWritten by Major for every post, comment and reply.\n\n"

// record appends e to person's log and commits it. It does not use the
// caller's cancellation: the action already happened on LinkedIn and
// should be on record even if the tool call was abandoned.
func (l *activityLog) record(ctx context.Context, person string, e entry) error {
	if l.log == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.timeout)
	defer cancel()
	err := l.log.Append(ctx, vault.Entry{
		Log:     ActivityLogPath(person),
		Header:  activityHeader,
		Line:    formatEntry(l.now(), e),
		Message: fmt.Sprintf("LinkedIn %s %s (%s)", e.action, e.urn, person),
	})
	if err != nil {
		return fmt.Errorf("activity log: %w", err)
	}
	return nil
}

// formatEntry renders one markdown list item. The text is quoted Go-style so
// that newlines and quotes in it can never break the list.
func formatEntry(at time.Time, e entry) string {
	where := ""
	switch e.action {
	case "comment":
		where = " on " + e.target
	case "reply":
		where = " to " + e.target
	}
	return fmt.Sprintf("- %s %s %s%s %s\n", at.UTC().Format(time.RFC3339), e.action, e.urn, where, strconv.Quote(e.text))
}
