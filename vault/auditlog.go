package vault

import (
	"context"
	"fmt"
	"io"
	"path"
	"strings"
	"sync"

	"github.com/majorhq/major/internal/nofollow"
)

// Entry is one line for an audit log.
type Entry struct {
	// Log is the log file, relative to the vault root and slash-separated;
	// it must lie in AuditDir.
	Log string
	// Header is written before the first line of a new, empty log.
	Header string
	// Line is the entry, newline included.
	Line string
	// Message is the message of the commit that records the line; it is
	// kept on one line.
	Message string
}

// AuditLog appends entries to the server's logs in AuditDir and commits
// each one. Every audit log of the server (the web requests, the LinkedIn
// activity) is written through it, with the same rules: no link is
// followed on the way to the file, an entry never joins an unterminated
// last line, and each commit holds exactly its own entry.
type AuditLog struct {
	root string
	git  *GitSync

	mu    sync.Mutex
	files map[string]*sync.Mutex
}

// NewAuditLog returns an AuditLog for the vault at root that commits
// through git; a nil git leaves the logs written but uncommitted.
func NewAuditLog(root string, git *GitSync) *AuditLog {
	return &AuditLog{root: root, git: git, files: map[string]*sync.Mutex{}}
}

// Append appends e.Line to the log e.Log and commits that file with
// e.Message, in the GitSync's queue (pull, write, commit, push). The
// caller bounds it with ctx. As with GitSync.Do, a git failure does not
// undo the written line; it is returned after it.
func (l *AuditLog) Append(ctx context.Context, e Entry) error {
	rel := path.Clean(e.Log)
	if !strings.HasPrefix(rel, AuditDir+"/") {
		return fmt.Errorf("audit log %q is not in %s/", e.Log, AuditDir)
	}
	// Two sessions may log to one file at once: the lock keeps a new
	// log's header first and, without git, the lines whole.
	lock := l.lock(rel)
	lock.Lock()
	defer lock.Unlock()
	write := func() error { return appendLine(l.root, rel, e.Header, e.Line) }
	if l.git == nil {
		return write()
	}
	return l.git.Do(ctx, oneLine(e.Message), []string{rel}, write)
}

func (l *AuditLog) lock(rel string) *sync.Mutex {
	l.mu.Lock()
	defer l.mu.Unlock()
	m, ok := l.files[rel]
	if !ok {
		m = &sync.Mutex{}
		l.files[rel] = m
	}
	return m
}

// appendLine appends line to the file rel below root, creating it and its
// folders; an empty file gets header first, and an unterminated last line
// is ended so an entry never joins the previous one. No link is followed
// on the way (a pulled commit could have turned a folder of the log into
// one pointing into a person's vault).
func appendLine(root, rel, header, line string) error {
	f, err := nofollow.OpenAppend(root, rel, 0o644)
	if err != nil {
		return fmt.Errorf("open log: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat log: %w", err)
	}
	if st.Size() == 0 {
		line = header + line
	} else {
		last := make([]byte, 1)
		if _, err := f.ReadAt(last, st.Size()-1); err != nil && err != io.EOF {
			return fmt.Errorf("read log: %w", err)
		}
		if last[0] != '\n' {
			line = "\n" + line
		}
	}
	if _, err := f.WriteString(line); err != nil {
		return fmt.Errorf("append to log: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close log: %w", err)
	}
	return nil
}

// oneLine keeps a value that goes into a commit message on one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
