package vault

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// ErrClosed is returned by a GitSync that has been closed.
var ErrClosed = errors.New("git sync is closed")

// ErrRemoteTimeout says the remote did not answer a pull or a push within
// GitConfig.RemoteTimeout: the sync committed locally and did not wait
// for it any longer; the next sync tries again.
var ErrRemoteTimeout = errors.New("the remote did not answer in time")

// errWritesOpen says a sync did not pull because files were still being
// written; the next sync catches up.
var errWritesOpen = errors.New("files were still being written, so the vault was not pulled; the next sync catches up")

// GitConfig configures a GitSync.
type GitConfig struct {
	// Root is the vault repository's work tree.
	Root string
	// Remote is the remote to pull from and push to. Empty: the remote the
	// current branch tracks, if any; a branch that tracks nothing is only
	// committed locally.
	Remote string
	// Branch is the remote branch. Empty: the branch the current branch
	// tracks, else the current branch's own name.
	Branch string
	// Timeout bounds each git call; default 30s.
	Timeout time.Duration
	// RemoteTimeout bounds each call that talks to the remote (a pull, a
	// push): a remote that accepts connections and never answers holds a
	// sync, and the turn end waiting for it, this long at most (Timeout
	// too, if shorter); default 20s.
	RemoteTimeout time.Duration
	// PushRetries bounds how often a push the remote rejected is pulled
	// and tried again; default 3.
	PushRetries int
	// Git is the git executable; default "git" from PATH.
	Git string
	// Env is added to the environment of every git call.
	Env []string
	// WriteTTL bounds how long a file-tool write's lease (BeginWrite) is
	// honoured when its end is not reported; default 5s. A file tool
	// runs in milliseconds; a lease nobody ends (one taken by hand with a
	// terminal's hook token) must not keep syncs from pulling. Shorter
	// than WriteWait, it never does: no lease is taken or renewed while a
	// sync runs, so the ones open when it starts have expired before it
	// stops waiting.
	WriteTTL time.Duration
	// WriteWait bounds how long a sync waits for open writes; after it,
	// the sync commits without pulling or retrying a push. Default 10s.
	WriteWait time.Duration
	// WriteHold bounds how long a write waits for a running sync before
	// BeginWrite gives up with ErrSyncRunning; default 20s.
	WriteHold time.Duration
	// AuthorName and AuthorEmail sign the commits; default "Major" and
	// "major@localhost".
	AuthorName, AuthorEmail string
	Logger                  zerolog.Logger
}

// GitSync serialises every write to the vault repository: all writers (the
// audit logs, end-of-turn commits, other features' activity logs) share one
// GitSync, so two sessions never run git in the same work tree at once.
type GitSync struct {
	cfg GitConfig
	log zerolog.Logger

	// sem is a one-slot queue; a channel rather than a mutex so that a
	// writer waiting its turn gives up when its context ends.
	sem chan struct{}
	// base is cancelled by Close: it kills the git call in flight.
	base context.Context
	stop context.CancelFunc
	once sync.Once
	// writes are the file-tool writes in flight in the work tree.
	writes *writeLeases
	// dir is the git directory, once known; only the queue's holder
	// touches it.
	dir string
}

// NewGitSync returns a GitSync for the repository at cfg.Root.
func NewGitSync(cfg GitConfig) *GitSync {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.RemoteTimeout <= 0 {
		cfg.RemoteTimeout = 20 * time.Second
	}
	if cfg.PushRetries <= 0 {
		cfg.PushRetries = 3
	}
	if cfg.Git == "" {
		cfg.Git = "git"
	}
	if cfg.AuthorName == "" {
		cfg.AuthorName = "Major"
	}
	if cfg.AuthorEmail == "" {
		cfg.AuthorEmail = "major@localhost"
	}
	if cfg.WriteTTL <= 0 {
		cfg.WriteTTL = 5 * time.Second
	}
	if cfg.WriteWait <= 0 {
		cfg.WriteWait = 10 * time.Second
	}
	if cfg.WriteHold <= 0 {
		cfg.WriteHold = 20 * time.Second
	}
	base, stop := context.WithCancel(context.Background())
	return &GitSync{
		cfg:    cfg,
		log:    cfg.Logger.With().Str("component", "gitsync").Logger(),
		sem:    make(chan struct{}, 1),
		base:   base,
		stop:   stop,
		writes: newWriteLeases(cfg.WriteTTL),
	}
}

// BeginWrite records that a file tool (toolUseID, in session) is about to
// write into the work tree, or read it, so no sync pulls under it. While a
// sync runs it waits, up to WriteHold, then fails with ErrSyncRunning; while
// session has 10 writes open it waits likewise for one of them to end, then
// fails with ErrTooManyWrites. EndWrite or EndWrites ends it; one never
// ended expires after WriteTTL. Beginning toolUseID again renews it.
func (g *GitSync) BeginWrite(ctx context.Context, session, toolUseID string) error {
	return g.writes.begin(ctx, writeKey{session, toolUseID}, g.cfg.WriteHold)
}

// EndWrite records that the write toolUseID of session is over.
func (g *GitSync) EndWrite(session, toolUseID string) {
	g.writes.end(writeKey{session, toolUseID})
}

// EndWrites ends every write of session (its turn is over).
func (g *GitSync) EndWrites(session string) {
	g.writes.endSession(session)
}

// WriteHold is how long BeginWrite waits for a running sync before it
// gives up.
func (g *GitSync) WriteHold() time.Duration { return g.cfg.WriteHold }

// Close stops the git call in flight, waits for its writer to finish and
// makes every later call fail with ErrClosed. It is idempotent.
func (g *GitSync) Close() error {
	g.once.Do(func() {
		g.stop()
		g.sem <- struct{}{} // wait for the writer in flight; never released
	})
	return nil
}

// Commit commits the given paths (relative to Root) as they are in the work
// tree, with message, and pushes when there is a remote. Nothing to commit
// is not an error.
func (g *GitSync) Commit(ctx context.Context, message string, paths ...string) error {
	return g.Do(ctx, message, paths, nil)
}

// Do runs one write to the repository in the queue: pull (rebase) when there
// is a remote, then write (may be nil), then commit paths with message and
// push; a push the remote rejected because it moved on is pulled and tried
// again a bounded number of times. A failed pull does not stop the write
// and the local commit, and no git failure stops the write, so nothing
// written is lost; the error is still returned. An error from write stops
// before the commit.
func (g *GitSync) Do(ctx context.Context, message string, paths []string, write func() error) error {
	if err := checkPaths(paths); err != nil {
		return err
	}
	if err := g.acquire(ctx); err != nil {
		return err
	}
	defer func() { <-g.sem }()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(g.base, cancel)
	defer stop()

	// A pull rewrites the work tree (autostash, rebase): file tools must
	// not write meanwhile. When they do not stop in time, this write is
	// committed without a pull, and pushed only if the remote takes it as
	// it is.
	quiet, release := g.writes.quiesce(ctx, g.cfg.WriteWait)
	defer release()
	if !quiet {
		g.log.Warn().Dur("waited_ms", g.cfg.WriteWait).Msg("files are still being written; committing without pulling")
	}

	// A git call killed half way (by its timeout, or a crash of the
	// server) may have left a lock or an unfinished rebase that would make
	// every later call fail.
	recoverErr := g.recoverRepo(ctx)

	// Git failing before the write must not lose the write: it goes ahead,
	// and the error is returned after it.
	up, upErr := g.upstream(ctx)
	if upErr != nil {
		upErr = g.fail("find upstream", upErr)
	}
	var pullErr error
	if up.remote != "" && !quiet {
		pullErr = errWritesOpen
	} else if up.remote != "" {
		pullErr = g.pull(ctx, up)
		if pullErr != nil {
			g.log.Warn().Err(pullErr).Msg("pull before write failed; writing and committing locally")
		}
	}
	if write != nil {
		if err := write(); err != nil {
			return fmt.Errorf("write: %w", err)
		}
	}
	if upErr != nil {
		return errors.Join(upErr, recoverErr)
	}
	committed, err := g.commit(ctx, message, paths)
	// Paths git refused stay out of the commit; the rest is committed and
	// pushed as usual, and the refusal is returned with the outcome.
	var refused *RefusedPathsError
	also := recoverErr
	if errors.As(err, &refused) {
		g.log.Error().Strs("paths", refused.Paths).Msg("git refused to record some paths; the other changes were committed")
		also, err = errors.Join(err, recoverErr), nil
	}
	if err != nil {
		return errors.Join(g.fail("commit", err), recoverErr)
	}
	switch {
	case up.remote == "":
		return also
	case errors.Is(pullErr, ErrRemoteTimeout):
		// A push would wait as long for the remote; the next sync sends
		// this commit.
		return errors.Join(g.fail("pull", pullErr), also)
	case committed:
		retries := g.cfg.PushRetries
		if !quiet {
			retries = 0 // a retry pulls
		}
		if err := g.push(ctx, up, retries); err != nil {
			if !quiet {
				err = fmt.Errorf("%w; %w", errWritesOpen, err)
			}
			return errors.Join(g.fail("push", err), also)
		}
		return also
	case pullErr != nil:
		return errors.Join(fmt.Errorf("git pull: %w", pullErr), also) // logged above
	}
	return also
}

// CommitTurn commits what a turn of session sessionID changed in person's
// folder, and only there; a turn that changed nothing commits nothing.
// The message says what changed ("sebastian: 2 notes changed (a.md,
// b.md)") and names the session in its body, where SessionHead finds it.
func (g *GitSync) CommitTurn(ctx context.Context, person, sessionID string) error {
	if !ValidPerson(person) {
		return fmt.Errorf("person %q is %w", person, ErrPersonName)
	}
	dir := person + "/"
	files, err := g.changedFiles(ctx, dir)
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return nil
	}
	message := TurnCommitMessage(person, files) + "\n\n" +
		fmt.Sprintf("Session %s: the changes of a turn in %s's folder.", oneLine(sessionID), person)
	return g.Commit(ctx, message, dir)
}

// turnCommitNames is how many changed files a turn's commit subject names.
const turnCommitNames = 3

// TurnCommitMessage is the subject of a turn's commit in person's folder:
// how many notes (or files, when not all are Markdown) changed, and the
// first few of them by their path in the folder.
func TurnCommitMessage(person string, files []string) string {
	noun := "note"
	for _, f := range files {
		if !strings.EqualFold(path.Ext(f), ".md") {
			noun = "file"
			break
		}
	}
	if len(files) != 1 {
		noun += "s"
	}
	names := make([]string, 0, turnCommitNames+1)
	for i, f := range files {
		if i == turnCommitNames {
			names = append(names, fmt.Sprintf("and %d more", len(files)-i))
			break
		}
		names = append(names, oneLine(f))
	}
	return fmt.Sprintf("%s: %d %s changed (%s)", person, len(files), noun, strings.Join(names, ", "))
}

// changedFiles lists what differs from HEAD or is untracked under dir (a
// person's folder, "name/"), by path relative to it, sorted.
func (g *GitSync) changedFiles(ctx context.Context, dir string) ([]string, error) {
	if err := checkPaths([]string{dir}); err != nil {
		return nil, err
	}
	if err := g.acquire(ctx); err != nil {
		return nil, err
	}
	defer func() { <-g.sem }()
	out, err := g.git(ctx, "status", "--porcelain=v1", "-z", "--no-renames", "--untracked-files=all", "--ignore-submodules=all", "--", dir)
	if err != nil {
		return nil, g.fail("status", err)
	}
	var files []string
	// -z: "XY path\0" per entry; without renames one path each.
	for _, entry := range strings.Split(out, "\x00") {
		if len(entry) > 3 {
			files = append(files, strings.TrimPrefix(entry[3:], dir))
		}
	}
	sort.Strings(files)
	return files, nil
}

// Changed reports whether anything under paths differs from HEAD or is
// untracked (git status --porcelain).
func (g *GitSync) Changed(ctx context.Context, paths ...string) (bool, error) {
	if err := checkPaths(paths); err != nil {
		return false, err
	}
	if err := g.acquire(ctx); err != nil {
		return false, err
	}
	defer func() { <-g.sem }()
	out, err := g.git(ctx, append([]string{"status", "--porcelain", "--untracked-files=all", "--ignore-submodules=all", "--"}, paths...)...)
	if err != nil {
		return false, g.fail("status", err)
	}
	return strings.TrimSpace(out) != "", nil
}

func (g *GitSync) acquire(ctx context.Context) error {
	if g.base.Err() != nil {
		return ErrClosed
	}
	select {
	case g.sem <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("wait for git queue: %w", ctx.Err())
	case <-g.base.Done():
		return ErrClosed
	}
	if g.base.Err() != nil {
		<-g.sem
		return ErrClosed
	}
	return nil
}

func (g *GitSync) fail(step string, err error) error {
	g.log.Error().Err(err).Str("step", step).Msg("git sync failed")
	return &SyncError{Step: step, Err: err}
}

// SyncError is a step of a sync that failed; Err has git's own words,
// which belong in the server's log.
type SyncError struct {
	Step string // "find upstream", "pull", "commit" or "push"
	Err  error
}

func (e *SyncError) Error() string { return "git " + e.Step + ": " + e.Err.Error() }
func (e *SyncError) Unwrap() error { return e.Err }

// Explain says in plain words what a failed sync means for the person's
// notes. It never repeats git's output, which can name the server's paths
// or a remote's address with its credentials; that goes to the log.
func Explain(err error) string {
	var refused *RefusedPathsError
	var failed *SyncError
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrRemoteTimeout):
		return "Your notes are saved and committed, but the shared repository did not answer in time; the next change sends them."
	case errors.As(err, &failed) && failed.Step == "push":
		return "Your notes are saved and committed, but sending them to the shared repository failed; the next change tries again."
	case errors.Is(err, ErrClosed), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// Cut off: a shutdown's deadline, or git's own bound.
		return "Your notes are saved, but the server could not record them in git in time; the next change records them."
	case errors.As(err, &failed):
		return "Your notes are saved, but recording them in git failed; the server's log has the details."
	case errors.Is(err, errWritesOpen):
		return "Your notes are saved and committed; they are synced with the shared repository with the next change."
	case errors.As(err, &refused):
		return fmt.Sprintf("Your notes are saved and committed, except %s, whose name git does not accept.", strings.Join(refused.Paths, ", "))
	default:
		return "Your notes are saved, but syncing them with git failed; the server's log has the details."
	}
}

// checkPaths refuses paths that are absolute or leave the work tree: they
// are pathspecs, and a caller's mistake must not commit the whole vault.
func checkPaths(paths []string) error {
	if len(paths) == 0 {
		return errors.New("git sync: no paths to commit")
	}
	for _, p := range paths {
		c := filepath.Clean(p)
		if p == "" || filepath.IsAbs(p) || c == ".." || strings.HasPrefix(c, "../") || strings.HasPrefix(p, ":") {
			return fmt.Errorf("git sync: path %q is not inside the repository", p)
		}
	}
	return nil
}

type upstream struct{ remote, branch string }

// upstream finds where to pull from and push to.
func (g *GitSync) upstream(ctx context.Context) (upstream, error) {
	local, err := g.git(ctx, "symbolic-ref", "--short", "-q", "HEAD")
	if err != nil {
		return upstream{}, fmt.Errorf("current branch (detached HEAD?): %w", err)
	}
	local = strings.TrimSpace(local)
	up := upstream{remote: g.cfg.Remote, branch: g.cfg.Branch}
	if up.remote == "" {
		// Exit status 1 means the key is unset: the branch tracks nothing.
		r, err := g.git(ctx, "config", "--get", "branch."+local+".remote")
		if err != nil && !isExit(err, 1) {
			return upstream{}, err
		}
		up.remote = strings.TrimSpace(r)
	}
	if up.remote == "" {
		return upstream{}, nil
	}
	if up.branch == "" {
		m, err := g.git(ctx, "config", "--get", "branch."+local+".merge")
		if err != nil && !isExit(err, 1) {
			return upstream{}, err
		}
		up.branch = strings.TrimPrefix(strings.TrimSpace(m), "refs/heads/")
	}
	if up.branch == "" {
		up.branch = local
	}
	return up, nil
}

// pull rebases local commits onto the remote branch. A remote without the
// branch yet (a new, empty remote) has nothing to pull.
func (g *GitSync) pull(ctx context.Context, up upstream) error {
	_, err := g.remote(ctx, "pull", "--rebase", "--autostash", "--quiet", up.remote, up.branch)
	if err == nil {
		return nil
	}
	if !errors.Is(err, ErrRemoteTimeout) {
		if _, lsErr := g.remote(ctx, "ls-remote", "--exit-code", "--heads", up.remote, up.branch); isExit(lsErr, 2) {
			return nil
		}
	}
	// A conflicting rebase stops half way, a killed one leaves its lock:
	// put the branch back as it was so the work tree stays usable and the
	// next write can try again.
	return errors.Join(err, g.recoverRepo(context.WithoutCancel(ctx)))
}

// errAutostashKept says an unfinished rebase or pull was cleared but
// changes it held back could not be put back: they are in the stash list.
var errAutostashKept = errors.New("an unfinished rebase or pull was cleared, but changes it held back conflict with the work tree and were kept in git stash list")

// recoverRepo clears what a git call killed half way left behind. Every
// git call of this server in the work tree goes through the queue, which
// the caller holds, so an index.lock seen now is stale, and an unfinished
// rebase or fast-forward (a pull) is ours: it is aborted, and the changes
// its autostash held back, and those made since it stopped, are put back
// into the work tree; what no longer applies stays in the stash list and
// errAutostashKept says so.
func (g *GitSync) recoverRepo(ctx context.Context) error {
	dir := g.gitDir(ctx)
	if err := os.Remove(filepath.Join(dir, "index.lock")); err == nil {
		g.log.Warn().Msg("removed a stale .git/index.lock left by a killed git call")
	}
	var errs []error
	for _, d := range []string{"rebase-merge", "rebase-apply"} {
		if _, err := os.Stat(filepath.Join(dir, d)); err != nil {
			continue
		}
		autostash, _ := os.ReadFile(filepath.Join(dir, d, "autostash"))
		// The abort resets the work tree: what was written since the
		// rebase stopped is saved first and put back after it.
		since, err := g.git(ctx, "stash", "create")
		if err != nil {
			errs = append(errs, fmt.Errorf("save the changes before aborting an unfinished rebase: %w", err))
			break
		}
		_, err = g.git(ctx, "rebase", "--abort")
		g.log.Warn().Err(err).Msg("aborted an unfinished rebase")
		if err != nil {
			errs = append(errs, fmt.Errorf("abort an unfinished rebase: %w", err))
			break
		}
		// An autostash that did not apply is stored as the newest stash.
		if a := strings.TrimSpace(string(autostash)); a != "" {
			if top, _ := g.git(ctx, "rev-parse", "-q", "--verify", "refs/stash"); strings.TrimSpace(top) == a {
				errs = append(errs, errAutostashKept)
			}
		}
		if err := g.applyOrKeep(ctx, strings.TrimSpace(since), "changes made while a rebase was stopped"); err != nil {
			errs = append(errs, err)
		}
		break
	}
	// A pull that fast-forwards keeps its autostash here until it is done.
	if b, err := os.ReadFile(filepath.Join(dir, "MERGE_AUTOSTASH")); err == nil {
		g.log.Warn().Msg("applying the autostash of an unfinished pull")
		if err := g.applyOrKeep(ctx, strings.TrimSpace(string(b)), "autostash"); err != nil {
			errs = append(errs, err)
		}
		_ = os.Remove(filepath.Join(dir, "MERGE_AUTOSTASH"))
	}
	if err := errors.Join(errs...); err != nil {
		return g.fail("recover", err)
	}
	return nil
}

// applyOrKeep applies the stash commit oid (none: nothing to do) to the
// work tree; when it does not apply it is kept in the stash list under
// message and errAutostashKept is returned.
func (g *GitSync) applyOrKeep(ctx context.Context, oid, message string) error {
	if oid == "" {
		return nil
	}
	if _, err := g.git(ctx, "stash", "apply", oid); err == nil {
		return nil
	}
	if _, err := g.git(ctx, "stash", "store", "-m", message, oid); err != nil {
		return fmt.Errorf("keep %s (%s) in the stash list: %w", message, oid, err)
	}
	return errAutostashKept
}

// gitDir is the repository's git directory; it is looked up once.
func (g *GitSync) gitDir(ctx context.Context) string {
	if g.dir != "" {
		return g.dir
	}
	d, err := g.git(ctx, "rev-parse", "--absolute-git-dir")
	if err != nil {
		return filepath.Join(g.cfg.Root, ".git")
	}
	g.dir = strings.TrimSpace(d)
	return g.dir
}

// RefusedPathsError is a commit that left out paths git refused to
// record (a name git reserves, such as a variant of .git, or a file it
// could not read); every other change under the commit's paths was
// committed.
type RefusedPathsError struct {
	// Paths are relative to the repository's root.
	Paths []string
}

func (e *RefusedPathsError) Error() string {
	return fmt.Sprintf("git refused to record %q; the other changes were committed", e.Paths)
}

// commit stages and commits only paths; false when there was nothing to
// commit. A path git refuses does not hold back the others: they are
// committed and the refused ones returned as a *RefusedPathsError.
func (g *GitSync) commit(ctx context.Context, message string, paths []string) (bool, error) {
	var refused error
	if _, err := g.git(ctx, append([]string{"add", "--all", "--ignore-errors", "--"}, paths...)...); err != nil {
		p := refusedPaths(err)
		if len(p) == 0 {
			return false, err
		}
		refused = &RefusedPathsError{Paths: p}
	}
	if links, err := g.unstageRepositories(ctx, paths); err != nil {
		return false, err
	} else if len(links) > 0 {
		var prev []string
		var re *RefusedPathsError
		if errors.As(refused, &re) {
			prev = re.Paths
		}
		refused = &RefusedPathsError{Paths: append(prev, links...)}
	}
	_, err := g.git(ctx, append([]string{"diff", "--cached", "--quiet", "--"}, paths...)...)
	if err == nil {
		return false, refused
	}
	if !isExit(err, 1) {
		return false, err
	}
	// --only with the pathspec leaves anything else that happens to be
	// staged out of this commit.
	if _, err := g.git(ctx, append([]string{"commit", "--quiet", "--no-verify", "--only", "-m", message, "--"}, paths...)...); err != nil {
		return false, err
	}
	return true, refused
}

// unstageRepositories takes out of the index every repository that
// `git add` staged under paths (a gitlink: a folder with a .git of its
// own, which a person's sandbox can make) and returns their paths: the
// vault records notes, not other repositories, and a gitlink in the
// index would have later git commands look into it.
func (g *GitSync) unstageRepositories(ctx context.Context, paths []string) ([]string, error) {
	out, err := g.git(ctx, append([]string{"diff", "--cached", "--raw", "--no-renames", "-z", "--ignore-submodules=none", "--"}, paths...)...)
	if err != nil {
		return nil, err
	}
	// -z: ":<old mode> <new mode> <old sha> <new sha> <status>\0<path>\0".
	var links []string
	fields := strings.Split(out, "\x00")
	for i := 0; i+1 < len(fields); i += 2 {
		meta := strings.Fields(strings.TrimPrefix(fields[i], ":"))
		if len(meta) >= 2 && meta[1] == "160000" {
			links = append(links, fields[i+1])
		}
	}
	if len(links) == 0 {
		return nil, nil
	}
	if _, err := g.git(ctx, append([]string{"rm", "--cached", "-q", "-r", "-f", "--ignore-unmatch", "--"}, links...)...); err != nil {
		return nil, err
	}
	return links, nil
}

// refusedPaths are the paths a failed `git add --ignore-errors` names as
// not added.
func refusedPaths(err error) []string {
	var ge *gitError
	if !errors.As(err, &ge) {
		return nil
	}
	var out []string
	for _, line := range strings.Split(ge.output, "\n") {
		for _, f := range []struct{ pre, suf string }{
			{"error: unable to add '", "' to index"},
			{"error: unable to index file '", "'"},
		} {
			if rest, ok := strings.CutPrefix(line, f.pre); ok {
				if p, ok := strings.CutSuffix(rest, f.suf); ok {
					out = append(out, p)
				}
			}
		}
	}
	return out
}

// push pushes HEAD; when the remote rejects it (someone pushed meanwhile)
// it pulls with rebase and tries again, retries times at most.
func (g *GitSync) push(ctx context.Context, up upstream, retries int) error {
	var err error
	for attempt := 0; attempt <= retries; attempt++ {
		if attempt > 0 {
			g.log.Info().Int("attempt", attempt).Msg("push rejected; pulling and retrying")
			if perr := g.pull(ctx, up); perr != nil {
				return fmt.Errorf("pull after rejected push: %w", perr)
			}
		}
		_, err = g.remote(ctx, "push", "--quiet", "--porcelain", up.remote, "HEAD:refs/heads/"+up.branch)
		if err == nil || !rejected(err) {
			return err
		}
	}
	return fmt.Errorf("still rejected after %d retries: %w", retries, err)
}

// rejected tells a push the remote refused because it has commits we lack
// from other failures (network, auth), which a retry would not fix.
func rejected(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "[rejected]") || strings.Contains(msg, "non-fast-forward") ||
		strings.Contains(msg, "fetch first") || strings.Contains(msg, "cannot lock ref")
}

// gitError is a git call that failed, with what it said.
type gitError struct {
	args   []string
	err    error
	output string
}

func (e *gitError) Error() string {
	out := strings.TrimSpace(e.output)
	if len(out) > 600 {
		out = out[:600] + "…"
	}
	return fmt.Sprintf("git %s: %v: %s", strings.Join(e.args, " "), e.err, out)
}

func (e *gitError) Unwrap() error { return e.err }

// gitEnviron is the server's environment for git: what git needs to
// reach the remote (HOME, SSH, proxies, credential helpers' settings),
// without the model's credential or the server's own settings, which
// nothing git runs has any use for.
func gitEnviron(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "ANTHROPIC_"), strings.HasPrefix(k, "CLAUDE_CODE_OAUTH"), strings.HasPrefix(k, "MAJOR_"):
			continue
		}
		out = append(out, kv)
	}
	return out
}

func isExit(err error, code int) bool {
	var ee *exec.ExitError
	return errors.As(err, &ee) && ee.ExitCode() == code
}

// git runs one git command in Root, bounded by Timeout, and returns stdout.
func (g *GitSync) git(ctx context.Context, args ...string) (string, error) {
	return g.run(ctx, g.cfg.Timeout, args)
}

// remote is git for a command that talks to the remote, bounded by
// RemoteTimeout; running out of time is ErrRemoteTimeout.
func (g *GitSync) remote(ctx context.Context, args ...string) (string, error) {
	out, err := g.run(ctx, min(g.cfg.RemoteTimeout, g.cfg.Timeout), args)
	if errors.Is(err, errOwnTimeout) {
		err = fmt.Errorf("%w: %w", ErrRemoteTimeout, err)
	}
	return out, err
}

// errOwnTimeout marks a git call that ran out of its own bound, rather
// than its caller's context.
var errOwnTimeout = errors.New("git took too long")

// run runs one git command in Root, bounded by timeout, and returns
// stdout.
func (g *GitSync) run(parent context.Context, timeout time.Duration, args []string) (string, error) {
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()
	full := append([]string{
		"-c", "user.name=" + g.cfg.AuthorName,
		"-c", "user.email=" + g.cfg.AuthorEmail,
		// Hooks would run code from the repository on every commit; the
		// vault is data, so none run.
		"-c", "core.hooksPath=/dev/null",
		"-c", "commit.gpgsign=false",
		// A person's sandbox writes their folder: a repository it puts
		// there must never make git run anything or look inside it. No
		// file-system monitor (a nested repository's core.fsmonitor is a
		// program git runs), no descending into nested repositories or
		// submodules (each with configuration of its own).
		"-c", "core.fsmonitor=false",
		"-c", "submodule.recurse=false",
		"-c", "diff.ignoreSubmodules=all",
		"-c", "status.submoduleSummary=false",
	}, args...)
	cmd := exec.CommandContext(ctx, g.cfg.Git, full...)
	cmd.Dir = g.cfg.Root
	cmd.Env = append(gitEnviron(os.Environ()),
		"GIT_TERMINAL_PROMPT=0", // fail instead of waiting for credentials
		"GIT_EDITOR=true",
		"LC_ALL=C", // messages we match on are in English
	)
	cmd.Env = append(cmd.Env, g.cfg.Env...)
	inOwnGroup(cmd)
	cmd.WaitDelay = 2 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		switch {
		case parent.Err() != nil:
			err = fmt.Errorf("%w (%v)", parent.Err(), err)
		case ctx.Err() != nil:
			err = fmt.Errorf("%w after %s (%w: %v)", errOwnTimeout, timeout, ctx.Err(), err)
		}
		return stdout.String(), &gitError{args: args, err: err, output: stderr.String() + stdout.String()}
	}
	return stdout.String(), nil
}
