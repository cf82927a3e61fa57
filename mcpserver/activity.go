package mcpserver

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/majorhq/major/hooks"
	"github.com/majorhq/major/internal/nofollow"
)

// activityLog appends each LinkedIn action to the person's log under the
// vault's audit folder (ActivityLogPath) and commits it. Two sessions of one
// person may act at once, so each file has its own lock, held across append
// and commit: every commit then holds exactly its own entry.
type activityLog struct {
	root      string
	committer Committer
	now       func() time.Time
	timeout   time.Duration

	mu    sync.Mutex
	files map[string]*sync.Mutex
}

func newActivityLog(root string, c Committer, now func() time.Time, timeout time.Duration) *activityLog {
	return &activityLog{root: root, committer: c, now: now, timeout: timeout, files: map[string]*sync.Mutex{}}
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
	return hooks.AuditDir + "/linkedin_logs/" + person + ".md"
}

const activityHeader = "# LinkedIn activity\n\nWritten by Major for every post, comment and reply.\n\n"

// record appends e to person's log and commits it. It does not use the
// caller's cancellation: the action already happened on LinkedIn and
// should be on record even if the tool call was abandoned.
func (l *activityLog) record(ctx context.Context, person string, e entry) error {
	if l.root == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.timeout)
	defer cancel()
	rel := ActivityLogPath(person)
	lock := l.lock(rel)
	lock.Lock()
	defer lock.Unlock()
	if err := l.append(rel, e); err != nil {
		return err
	}
	if l.committer == nil {
		return nil
	}
	msg := fmt.Sprintf("LinkedIn %s %s (%s)", e.action, e.urn, person)
	if err := l.committer.Commit(ctx, msg, rel); err != nil {
		return fmt.Errorf("commit activity log: %w", err)
	}
	return nil
}

func (l *activityLog) lock(path string) *sync.Mutex {
	l.mu.Lock()
	defer l.mu.Unlock()
	m, ok := l.files[path]
	if !ok {
		m = &sync.Mutex{}
		l.files[path] = m
	}
	return m
}

// append writes e to the log rel (below the vault root), following no
// link on the way: a pulled commit could have made any folder of the path a
// link into a person's vault.
func (l *activityLog) append(rel string, e entry) error {
	f, err := nofollow.OpenAppend(l.root, rel, 0o644)
	if err != nil {
		return fmt.Errorf("open activity log: %w", err)
	}
	line := formatEntry(l.now(), e)
	if st, err := f.Stat(); err == nil && st.Size() == 0 {
		line = activityHeader + line
	}
	if _, err := f.WriteString(line); err != nil {
		_ = f.Close()
		return fmt.Errorf("append activity log: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close activity log: %w", err)
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
