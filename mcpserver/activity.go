package mcpserver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// activityLog appends each LinkedIn action to the person's
// linkedin/activity.md and commits it. Two sessions of one person may act at
// once, so each file has its own lock, held across append and commit: every
// commit then holds exactly its own entry.
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

// activityRel is where person's log lives, relative to the vault root.
func activityRel(person string) string {
	return filepath.ToSlash(filepath.Join(person, "linkedin", "activity.md"))
}

func activityPath(root, person string) string {
	return filepath.Join(root, filepath.FromSlash(activityRel(person)))
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
	path := activityPath(l.root, person)
	lock := l.lock(path)
	lock.Lock()
	defer lock.Unlock()
	if err := l.append(path, e); err != nil {
		return err
	}
	if l.committer == nil {
		return nil
	}
	msg := fmt.Sprintf("LinkedIn %s %s (%s)", e.action, e.urn, person)
	if err := l.committer.Commit(ctx, msg, activityRel(person)); err != nil {
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

func (l *activityLog) append(path string, e entry) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create activity log folder: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
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
