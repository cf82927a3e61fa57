package vault

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// FileChange is one file a commit changed in a person's folder, relative
// to it. Status is added, modified, deleted or renamed; a binary file
// counts no lines.
type FileChange struct {
	Path       string `json:"path"`
	Status     string `json:"status"`
	Insertions int    `json:"insertions"`
	Deletions  int    `json:"deletions"`
	Binary     bool   `json:"binary,omitempty"`
}

// commitID is a full or abbreviated object name, so a value read back from
// a session's log can never be taken by git for an option or a range.
var commitID = regexp.MustCompile(`^[0-9a-f]{7,64}$`)

// MaxDiff bounds the diff of one commit a client is given; a longer one is
// cut, with a line saying so.
const MaxDiff = 2 << 20

// SessionHead is the newest commit whose message names sessionID (the
// commits a session's turn ends and rewinds make) among those made since
// (the session's start: git stops walking the history there, so a session
// without commits does not cost a walk of all of it), "" when there is
// none. It reads objects only, so it does not wait for the sync queue.
func (g *GitSync) SessionHead(ctx context.Context, sessionID string, since time.Time) (string, error) {
	if strings.ContainsAny(sessionID, "\n\r") || sessionID == "" {
		return "", fmt.Errorf("session id %q cannot name commits", sessionID)
	}
	args := []string{"log", "-1", "--format=%H", "--fixed-strings", "--grep=Session " + sessionID + ":"}
	if !since.IsZero() {
		// A minute of slack for clocks that step back.
		args = append(args, "--since="+strconv.FormatInt(since.Add(-time.Minute).Unix(), 10))
	}
	out, err := g.git(ctx, append(args, "HEAD", "--")...)
	if err != nil {
		if isExit(err, 128) {
			return "", nil // no commit at all yet
		}
		return "", g.fail("log", err)
	}
	return strings.TrimSpace(out), nil
}

// CommitFiles lists the files commit changed in person's folder, with
// their lines added and removed; paths are relative to the folder.
func (g *GitSync) CommitFiles(ctx context.Context, person, commit string) ([]FileChange, error) {
	if err := checkCommit(person, commit); err != nil {
		return nil, err
	}
	rel := "--relative=" + person + "/"
	status, err := g.git(ctx, "-c", "core.quotepath=false", "show", "--no-ext-diff", "--no-textconv", "--format=", "-z",
		"--name-status", "--find-renames", rel, commit, "--", person+"/")
	if err != nil {
		return nil, g.fail("show", err)
	}
	numstat, err := g.git(ctx, "-c", "core.quotepath=false", "show", "--no-ext-diff", "--no-textconv", "--format=", "-z",
		"--numstat", "--find-renames", rel, commit, "--", person+"/")
	if err != nil {
		return nil, g.fail("show", err)
	}
	files := parseNameStatus(status)
	counts := parseNumstat(numstat)
	for i := range files {
		if c, ok := counts[files[i].Path]; ok {
			files[i].Insertions, files[i].Deletions, files[i].Binary = c.Insertions, c.Deletions, c.Binary
		}
	}
	return files, nil
}

// CommitDiff is commit's unified diff of person's folder, paths relative
// to it: text files line by line, binary files named only (git's "Binary
// files ... differ"); at most MaxDiff bytes.
func (g *GitSync) CommitDiff(ctx context.Context, person, commit string) (string, error) {
	if err := checkCommit(person, commit); err != nil {
		return "", err
	}
	out, err := g.git(ctx, "-c", "core.quotepath=false", "show", "--no-ext-diff", "--no-textconv", "--no-color", "--format=",
		"--patch", "--find-renames", "--relative="+person+"/", commit, "--", person+"/")
	if err != nil {
		return "", g.fail("show", err)
	}
	if len(out) > MaxDiff {
		cut := strings.LastIndexByte(out[:MaxDiff], '\n') + 1
		out = out[:cut] + fmt.Sprintf("[the diff is %d bytes; only the first %d are shown]\n", len(out), cut)
	}
	return out, nil
}

func checkCommit(person, commit string) error {
	if err := CheckPerson(person); err != nil {
		return err
	}
	if !commitID.MatchString(commit) {
		return fmt.Errorf("%q is not a commit id", commit)
	}
	return nil
}

// parseNameStatus reads `--name-status -z`: a status letter (with a score
// for renames), then one path, or two for a rename or copy.
func parseNameStatus(out string) []FileChange {
	fields := strings.Split(strings.TrimSuffix(out, "\x00"), "\x00")
	var files []FileChange
	for i := 0; i < len(fields); i++ {
		code := fields[i]
		if code == "" {
			continue
		}
		paths := 1
		if code[0] == 'R' || code[0] == 'C' {
			paths = 2
		}
		if i+paths >= len(fields) {
			break
		}
		path := fields[i+paths]
		i += paths
		status := "modified"
		switch code[0] {
		case 'A', 'C':
			status = "added"
		case 'D':
			status = "deleted"
		case 'R':
			status = "renamed"
		}
		files = append(files, FileChange{Path: path, Status: status})
	}
	return files
}

// parseNumstat reads `--numstat -z`: "added\tdeleted\tpath" records, or
// for a rename "added\tdeleted\t" followed by the old and the new path;
// "-" counts mark a binary file.
func parseNumstat(out string) map[string]FileChange {
	fields := strings.Split(strings.TrimSuffix(out, "\x00"), "\x00")
	counts := map[string]FileChange{}
	for i := 0; i < len(fields); i++ {
		parts := strings.SplitN(fields[i], "\t", 3)
		if len(parts) != 3 {
			continue
		}
		path := parts[2]
		if path == "" && i+2 < len(fields) {
			path = fields[i+2] // a rename: old, then new
			i += 2
		}
		var c FileChange
		if parts[0] == "-" && parts[1] == "-" {
			c.Binary = true
		} else {
			c.Insertions, _ = strconv.Atoi(parts[0])
			c.Deletions, _ = strconv.Atoi(parts[1])
		}
		counts[path] = c
	}
	return counts
}
