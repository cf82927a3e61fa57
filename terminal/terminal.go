// Package terminal runs Claude Code's own interactive interface on a chat
// session's conversation, under a pseudo-terminal (creack/pty), for a
// client attached over the HTTP API: keystrokes in, screen bytes out,
// resizes. A Manager keeps one Terminal per session; a Terminal whose
// client went away stays alive for a grace time, keeping a bounded
// scroll-back that a client attaching again gets first, and then ends:
// its process group is killed, the pty closed, nothing left running.
// What a client types is queued and written to the pty by the terminal's
// own writer, so a CLI that reads nothing holds up no client.
//
// It owns the terminal's process and its pty and nothing else: the CLI's
// command line comes from assembly, the hooks are answered by package hooks
// (as commands of the major binary, through hooks.Commands), the slot from
// the supervisor's Pool, and the rule that one writer has the conversation
// at a time from the relay session (Chat). It serves no HTTP.
package terminal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"github.com/google/uuid"
	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/majorhq/major/attachments"
	"github.com/majorhq/major/clihome"
	"github.com/majorhq/major/hooks"
	"github.com/majorhq/major/internal/procgroup"
	"github.com/majorhq/major/relay"
	"github.com/majorhq/major/supervisor"
)

// Why a client's output ended (Client.Err).
var (
	// ErrEnded: the terminal's claude exited or the terminal was closed.
	ErrEnded = errors.New("the terminal has ended")
	// ErrStopped: the session's terminal was ended (End: its chat was
	// cleared) before it started.
	ErrStopped = errors.New("the chat was cleared before its terminal started")
	// ErrReplaced: another client attached to the terminal.
	ErrReplaced = errors.New("the terminal was opened by another client")
	// ErrSlow: the client read the screen too slowly; it attaches again
	// and gets the scroll-back.
	ErrSlow = errors.New("the client fell too far behind the terminal")
	// ErrTooMuchInput: the client typed more than the terminal holds for
	// the CLI to read (Config.InputBuffer); its last keystrokes were not
	// taken.
	ErrTooMuchInput = errors.New("the client typed faster than the terminal reads")
)

// Launch is one terminal's claude: its whole command line (a sandbox
// around it, if any), its environment, and Done, called once it has
// ended (its access to the model revoked).
type Launch struct {
	Argv []string
	Env  []string
	// Home is the CLI's home as the server sees it, where the first-run
	// answers are written ("" : as Env says, HOME or CLAUDE_CONFIG_DIR).
	Home string
	// Sandboxed: Argv runs the CLI in a sandbox (bwrap), which must not
	// get the hangup itself: it would die at once and take the CLI with
	// it before the CLI saved its conversation.
	Sandboxed bool
	Done      func()
}

// Chat is what a terminal needs of its session; *relay.Session satisfies
// it.
type Chat interface {
	CanOpenTerminal() error
	OpenTerminal() (cliSessionID string, err error)
	CloseTerminal(cliSessionID string)
	Notice(text string)
	// LastEntry is the CLI's id of the conversation's last entry the
	// app knows; TerminalTurns shows what was said in the terminal after
	// it, last being the newest entry then.
	LastEntry() string
	TerminalTurns(msgs []attachments.HistoryEntry, last string)
}

var _ Chat = (*relay.Session)(nil)

// Config configures a Manager.
type Config struct {
	// Launch is how a terminal of person's on session starts: resume is
	// the conversation to continue, or "" for a new one with the id
	// newID.
	Launch func(person, session, resume, newID string) (Launch, error)
	// Dir is person's vault, the CLI's working directory.
	Dir func(person string) string
	// Commands answers the terminals' hook commands.
	Commands *hooks.Commands
	// Ended runs after a terminal ended, as at the end of a turn (leases
	// released, changes committed), within a minute or by the deadline
	// of a shutdown (Shutdown); a status it returns is shown to the
	// session's clients.
	Ended func(ctx context.Context, person, sessionID string) string
	// Pool, when set, gives each terminal a process slot and keeps its
	// process group in the orphan records while it runs.
	Pool *supervisor.Pool
	// Grace is how long a terminal without a client stays alive; default
	// 5m.
	Grace time.Duration
	// Scrollback bounds the screen bytes kept for a client that attaches
	// again; default 256 KiB.
	Scrollback int
	// InputBuffer bounds the bytes typed that the CLI has not read yet; a
	// client that types past it is cut off (ErrTooMuchInput); default
	// 1 MiB.
	InputBuffer int
	Logger      zerolog.Logger
}

// Manager keeps the terminals of all sessions, one per session.
type Manager struct {
	cfg Config
	log zerolog.Logger
	wg  sync.WaitGroup
	// closing ends when a shutdown begins: a start waiting for a slot
	// gives up. hooks ends when the shutdown's time is up: Ended hooks
	// still running give up.
	closing, hooks         context.Context
	beginClose, closeHooks context.CancelFunc

	mu   sync.Mutex
	byID map[string]*Terminal
	// starting has a channel, closed once the start is over, for each
	// session whose terminal is starting.
	starting map[string]chan struct{}
	// stopStart ends the start of each session's terminal that is
	// starting (End: its chat is gone).
	stopStart map[string]context.CancelCauseFunc
	closed    bool
	// configLocks order the writes of the CLI's first-run answers, one
	// lock per CLI home (a person's), so one person's home never holds up
	// another's terminal.
	configLocks sync.Map // home → *sync.Mutex
}

// NewManager returns a Manager with no terminals.
func NewManager(cfg Config) *Manager {
	if cfg.Grace <= 0 {
		cfg.Grace = 5 * time.Minute
	}
	if cfg.Scrollback <= 0 {
		cfg.Scrollback = 256 << 10
	}
	if cfg.InputBuffer <= 0 {
		cfg.InputBuffer = 1 << 20
	}
	m := &Manager{cfg: cfg, log: cfg.Logger.With().Str("component", "terminal").Logger(), byID: map[string]*Terminal{},
		starting: map[string]chan struct{}{}, stopStart: map[string]context.CancelCauseFunc{}}
	m.closing, m.beginClose = context.WithCancel(context.Background())
	m.hooks, m.closeHooks = context.WithCancel(context.Background())
	return m
}

// Attach attaches a client to the terminal of session id (person's, whose
// chat it is), starting the terminal if none runs: the chat hands its
// conversation over first (relay's one-writer rule: supervisor.ErrBusy
// while a turn runs), and the terminal takes a process slot. A client
// already attached is replaced, and so is one whose terminal is still
// starting: this one waits for the start and takes the terminal over.
func (m *Manager) Attach(ctx context.Context, id, person string, chat Chat) (*Client, error) {
	for {
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return nil, ErrEnded
		}
		if t := m.byID[id]; t != nil {
			m.mu.Unlock()
			if c := t.attach(); c != nil {
				return c, nil
			}
			return nil, relay.ErrTerminalOpen // it is ending right now
		}
		starting, ok := m.starting[id]
		if !ok {
			break // m.mu stays held for the start's bookkeeping
		}
		m.mu.Unlock()
		select {
		case <-starting:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	started := make(chan struct{})
	m.starting[id] = started
	startCtx, stop := context.WithCancelCause(ctx)
	m.stopStart[id] = stop
	m.wg.Add(1) // Close waits for a start under way too
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.starting, id)
		delete(m.stopStart, id)
		m.mu.Unlock()
		stop(nil)
		close(started)
		m.wg.Done()
	}()

	resume, err := chat.OpenTerminal()
	if err != nil {
		return nil, err
	}
	c, err := m.start(startCtx, id, person, resume, chat)
	if err != nil {
		chat.CloseTerminal("")
		if endedStart(startCtx) {
			err = ErrStopped
		}
		return nil, err
	}
	return c, nil
}

// CanAttach reports what Attach would refuse now for session id (the
// server shutting down, the chat busy, its terminal ending), changing
// nothing: no terminal started, no slot taken, no client of the chat
// told. A server asks before it commits to a terminal's client (upgrades
// its connection); Attach may still refuse what changed since.
func (m *Manager) CanAttach(id string, chat Chat) error {
	m.mu.Lock()
	closed, t := m.closed, m.byID[id]
	_, starting := m.starting[id]
	m.mu.Unlock()
	switch {
	case closed:
		return ErrEnded
	case starting:
		return nil // the client takes the terminal over once it runs
	case t != nil:
		t.mu.Lock()
		ending := t.ended || t.killed
		t.mu.Unlock()
		if ending {
			return relay.ErrTerminalOpen
		}
		return nil // the client takes the running terminal over
	}
	return chat.CanOpenTerminal()
}

// Close ends every terminal and waits until they are gone: Shutdown
// without a deadline.
func (m *Manager) Close() { m.Shutdown(context.Background()) }

// Shutdown ends every terminal and waits until they are gone: a terminal
// still starting is refused (a wait for a slot ends at once) and no
// terminal starts from now on; the running ones are hung up, and killed
// when ctx ends, and their Ended hooks end with ctx too. It may be
// called again, and Close after it.
func (m *Manager) Shutdown(ctx context.Context) {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.beginClose()
	gone, late := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(late)
		select {
		case <-ctx.Done():
			m.closeHooks()
			for _, t := range m.all() {
				_ = syscall.Kill(-t.cmd.Process.Pid, syscall.SIGKILL)
			}
		case <-gone:
		}
	}()
	for _, t := range m.all() {
		t.kill()
	}
	m.wg.Wait()
	close(gone)
	<-late
}

// endedStart reports whether End stopped the start that ctx is of (not
// the client going away: a terminal started for it waits for it through
// the grace time).
func endedStart(ctx context.Context) bool { return errors.Is(context.Cause(ctx), ErrStopped) }

// all lists the terminals that run.
func (m *Manager) all() []*Terminal {
	m.mu.Lock()
	defer m.mu.Unlock()
	all := make([]*Terminal, 0, len(m.byID))
	for _, t := range m.byID {
		all = append(all, t)
	}
	return all
}

// End ends the terminal of session id, if one runs (the session was
// cleared): its process group is hung up, then killed, as at the end of
// its grace time; one still starting never starts. It reports whether
// one ran or was starting.
func (m *Manager) End(id string) bool {
	m.mu.Lock()
	t := m.byID[id]
	stop := m.stopStart[id]
	m.mu.Unlock()
	if t == nil {
		if stop == nil {
			return false
		}
		// Still starting (waiting for a slot, say): it never starts.
		stop(ErrStopped)
		return true
	}
	t.kill()
	return true
}

// EndPerson ends person's terminals, as End does, and returns once each
// has handed its conversation back to its chat (or with ctx's error):
// the person's state moves to another server. It reports how many ran.
func (m *Manager) EndPerson(ctx context.Context, person string) (int, error) {
	var theirs []*Terminal
	for _, t := range m.all() {
		if t.person == person {
			theirs = append(theirs, t)
		}
	}
	for _, t := range theirs {
		t.kill()
	}
	for _, t := range theirs {
		select {
		case <-t.done:
		case <-ctx.Done():
			return len(theirs), fmt.Errorf("end %s's terminals: %w", person, ctx.Err())
		}
	}
	return len(theirs), nil
}

// Live is how many terminals run.
func (m *Manager) Live() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.byID)
}

// Pid is the process id of session id's terminal, or 0.
func (m *Manager) Pid(id string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t := m.byID[id]; t != nil {
		return t.cmd.Process.Pid
	}
	return 0
}

// start starts session id's terminal and attaches its first client;
// once a shutdown has begun, it starts none (ErrEnded).
func (m *Manager) start(ctx context.Context, id, person, resume string, chat Chat) (*Client, error) {
	release := func() {}
	if m.cfg.Pool != nil {
		// A shutdown ends the wait for a slot.
		ctx, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(m.closing, cancel)
		r, err := m.cfg.Pool.Hold(ctx, person)
		stop()
		cancel()
		if err != nil {
			if m.closing.Err() != nil {
				return nil, ErrEnded
			}
			return nil, err
		}
		release = r
	}
	m.mu.Lock()
	closed := m.closed || endedStart(ctx)
	m.mu.Unlock()
	if closed {
		release()
		return nil, ErrEnded
	}
	dir := m.cfg.Dir(person)
	newID := ""
	if resume == "" {
		newID = uuid.NewString()
	}
	launch, err := m.cfg.Launch(person, id, resume, newID)
	if err != nil {
		release()
		return nil, fmt.Errorf("start terminal: %w", err)
	}
	if launch.Done != nil {
		release = func(r func()) func() { return func() { r(); launch.Done() } }(release)
	}
	if err := m.firstRunAnswered(launch, dir); err != nil {
		release()
		return nil, fmt.Errorf("start terminal: %w", err)
	}
	t := &Terminal{m: m, id: id, person: person, chat: chat, release: release, cliSession: resume, sandboxed: launch.Sandboxed, home: launch.Home, dir: dir,
		done: make(chan struct{}), typed: make(chan struct{}, 1), stopInput: make(chan struct{})}
	if resume == "" {
		t.cliSession = newID
	}
	token, unregister := m.cfg.Commands.Register(t)
	t.unregister = unregister
	cmd := exec.Command(launch.Argv[0], launch.Argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append(slices.Clone(launch.Env),
		"TERM=xterm-256color", "COLORTERM=truecolor",
		hooks.SocketEnv+"="+m.cfg.Commands.Socket(), hooks.TokenEnv+"="+token)
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: 100, Rows: 30})
	if err == nil {
		if t.pty, err = pollable(f); err != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
		}
	}
	if err != nil {
		unregister()
		release()
		return nil, fmt.Errorf("start terminal: %w", err)
	}
	t.cmd = cmd
	t.forget = func() {}
	if m.cfg.Pool != nil {
		t.forget = m.cfg.Pool.Track(cmd.Process.Pid, launch.Argv[0])
	}
	t.log = m.log.With().Str("session", id).Str("person", person).Int("pid", cmd.Process.Pid).Logger()
	t.log.Info().Str("resume", resume).Msg("terminal started")
	// Attached before anything runs, the client hears even of an end
	// that comes at once.
	c := t.attach()
	m.mu.Lock()
	m.byID[id] = t
	closed = m.closed || endedStart(ctx)
	m.mu.Unlock()
	readDone, writeDone := make(chan struct{}), make(chan struct{})
	m.wg.Add(3)
	go func() {
		defer m.wg.Done()
		defer close(readDone)
		t.read()
	}()
	go func() {
		defer m.wg.Done()
		defer close(writeDone)
		t.writeInput()
	}()
	go func() {
		defer m.wg.Done()
		t.wait(readDone, writeDone)
	}()
	if closed {
		t.kill() // the shutdown or End came as it started, and did not see it
	}
	return c, nil
}

// pollable hands the pty f to the runtime's poller and closes f: closing
// the file it returns wakes a Read or Write waiting on it, which closing
// f does not (package pty leaves its file in blocking mode, where a
// write to a CLI that reads nothing waits in the kernel until every
// holder of the terminal is gone).
func pollable(f *os.File) (*os.File, error) {
	defer f.Close()
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("duplicate the pty: %w", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("pty non-blocking: %w", err)
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}

// Terminal is one interactive claude on a session's conversation.
type Terminal struct {
	m          *Manager
	log        zerolog.Logger
	id, person string
	chat       Chat
	cmd        *exec.Cmd
	// pty is served by the runtime's poller (see pollable): its Close
	// wakes the reader and the writer.
	pty     *os.File
	release func()
	// sandboxed: the process is the CLI's sandbox (Launch.Sandboxed).
	sandboxed  bool
	unregister func()
	// forget removes the terminal's group from the orphan records.
	forget func()
	done   chan struct{}
	// typed has a token when input waits; stopInput is closed when the
	// terminal ends. Both are writeInput's.
	typed     chan struct{}
	stopInput chan struct{}

	mu     sync.Mutex
	scroll []byte
	client *Client
	// input is what clients typed that the pty has not taken yet, in
	// order; inputBytes counts it, the one being written included.
	input      [][]byte
	inputBytes int
	grace      *time.Timer
	cliSession string
	ended      bool
	killed     bool
	// home and dir are the CLI's home and working directory, where its
	// transcript of the conversation is.
	home, dir string
}

var _ hooks.Caller = (*Terminal)(nil)

// ID is the session's id (hooks.Caller).
func (t *Terminal) ID() string { return t.id }

// Person is the session's owner (hooks.Caller).
func (t *Terminal) Person() string { return t.person }

// Notice shows text to the session's clients (hooks.Caller).
func (t *Terminal) Notice(text string) { t.chat.Notice(text) }

// SawSession keeps the CLI conversation id the terminal's hooks name: the
// app resumes that one (hooks.SessionSeer). Every process in the sandbox
// can send a hook input, so a name that is not a conversation id is not
// taken: it would be the chat's saved conversation and break its next
// message.
func (t *Terminal) SawSession(id string) {
	if !clihome.IsConversationID(id) {
		// t.log is set once the process runs; a hook may come before.
		t.m.log.Warn().Str("session", t.id).Str("person", t.person).Int("bytes", len(id)).Msg("a hook input named no conversation id; the terminal keeps its own")
		return
	}
	t.mu.Lock()
	t.cliSession = id
	t.mu.Unlock()
}

// read copies the screen to the scroll-back and the attached client until
// the pty is closed.
func (t *Terminal) read() {
	buf := make([]byte, 32<<10)
	for {
		n, err := t.pty.Read(buf)
		if n > 0 {
			t.output(buf[:n])
		}
		if err != nil {
			return
		}
	}
}

func (t *Terminal) output(b []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.scroll = append(t.scroll, b...)
	if over := len(t.scroll) - t.m.cfg.Scrollback; over > 0 {
		t.scroll = append(t.scroll[:0], t.scroll[over:]...)
	}
	if c := t.client; c != nil {
		select {
		case c.out <- append([]byte(nil), b...):
		default:
			t.dropLocked(c, ErrSlow)
		}
	}
}

// writeInput types what the clients typed into the pty, in order, until
// the terminal ends. It alone waits for the CLI to read: a client's
// keystrokes are queued (Client.Write), so whoever reads the client's
// messages is never held up by a CLI that reads nothing, and sees a close
// at once. Closing the pty ends a write that waits.
func (t *Terminal) writeInput() {
	for {
		select {
		case <-t.typed:
		case <-t.stopInput:
			return
		}
		for {
			t.mu.Lock()
			if len(t.input) == 0 {
				t.mu.Unlock()
				break
			}
			b := t.input[0]
			t.input[0] = nil
			t.input = t.input[1:]
			t.mu.Unlock()
			_, err := t.pty.Write(b)
			t.mu.Lock()
			t.inputBytes -= len(b)
			t.mu.Unlock()
			if err != nil {
				return // the pty is closed or its CLI gone: the terminal is ending
			}
		}
	}
}

// wait reaps the process, then ends the terminal: leftovers in its group
// killed, pty closed (which ends the reader and the writer even when a
// process outside the group still holds the terminal), slot and hook
// token given back, the conversation handed back to the app, and then the
// client told.
func (t *Terminal) wait(readDone, writeDone <-chan struct{}) {
	err := t.cmd.Wait()
	_ = syscall.Kill(-t.cmd.Process.Pid, syscall.SIGKILL)
	t.forget()
	_ = t.pty.Close()
	close(t.stopInput)
	<-readDone
	<-writeDone
	t.mu.Lock()
	t.ended = true
	if t.grace != nil {
		t.grace.Stop()
	}
	cliSession := t.cliSession
	t.mu.Unlock()
	t.m.mu.Lock()
	delete(t.m.byID, t.id)
	t.m.mu.Unlock()
	t.unregister()
	t.release()
	t.log.Info().AnErr("exit", err).Msg("terminal ended")
	if t.m.cfg.Ended != nil {
		ctx, cancel := context.WithTimeout(t.m.hooks, time.Minute)
		if status := t.m.cfg.Ended(ctx, t.person, t.id); status != "" {
			t.chat.Notice(status)
		}
		cancel()
	}
	t.showTurns(cliSession)
	t.chat.CloseTerminal(cliSession)
	// The client hears of the end once the app has the conversation back.
	t.mu.Lock()
	if t.client != nil {
		t.dropLocked(t.client, ErrEnded)
	}
	t.mu.Unlock()
	close(t.done)
}

// showTurns gives the chat what was said in the terminal: the transcript
// of conversation cliSession after the entry the app knew last.
func (t *Terminal) showTurns(cliSession string) {
	if t.home == "" || cliSession == "" {
		return
	}
	f, err := clihome.OpenTranscript(t.home, t.dir, cliSession)
	if err != nil {
		t.log.Warn().Err(err).Msg("the terminal's turns are not shown in the chat")
		return
	}
	defer f.Close()
	msgs, last, err := readTurns(f, t.chat.LastEntry())
	if err != nil {
		t.log.Warn().Err(err).Msg("the terminal's turns are not shown in the chat")
		return
	}
	if len(msgs) > 0 {
		t.chat.TerminalTurns(msgs, last)
	}
}

// kill ends the terminal: SIGHUP (and SIGCONT, for a stopped process to
// see it) to its process group, as a closing terminal does, then SIGKILL
// after a moment. wait does the rest.
func (t *Terminal) kill() {
	t.mu.Lock()
	if t.ended || t.killed {
		t.mu.Unlock()
		return
	}
	t.killed = true
	t.mu.Unlock()
	pid := t.cmd.Process.Pid
	if t.sandboxed {
		// bwrap passes no signal on and dies of a hangup, killing the
		// sandbox: the hangup goes to the rest of the group, the CLI
		// first among them, and bwrap ends when they have.
		for _, p := range procgroup.Live(pid) {
			if p != pid {
				_ = syscall.Kill(p, syscall.SIGHUP)
				_ = syscall.Kill(p, syscall.SIGCONT)
			}
		}
	} else {
		_ = syscall.Kill(-pid, syscall.SIGHUP)
		_ = syscall.Kill(-pid, syscall.SIGCONT)
	}
	go func() {
		timer := time.NewTimer(3 * time.Second)
		defer timer.Stop()
		select {
		case <-t.done:
		case <-timer.C:
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	}()
}

// attach makes a new client the terminal's one, replacing the one before;
// nil once the terminal has ended.
func (t *Terminal) attach() *Client {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ended || t.killed {
		return nil
	}
	if t.client != nil {
		t.dropLocked(t.client, ErrReplaced)
	}
	if t.grace != nil {
		t.grace.Stop()
		t.grace = nil
	}
	c := &Client{t: t, out: make(chan []byte, 1024), replay: append([]byte(nil), t.scroll...)}
	t.client = c
	return c
}

// dropLocked ends c's output with err. t.mu is held.
func (t *Terminal) dropLocked(c *Client, err error) {
	if c.err != nil {
		return
	}
	c.err = err
	close(c.out)
	if t.client == c {
		t.client = nil
		if !t.ended && !t.killed {
			t.grace = time.AfterFunc(t.m.cfg.Grace, t.expire)
		}
	}
}

// expire ends a terminal that no client attached to within the grace
// time.
func (t *Terminal) expire() {
	t.mu.Lock()
	idle := t.client == nil
	t.mu.Unlock()
	if idle {
		t.log.Info().Dur("grace_ms", t.m.cfg.Grace).Msg("no client came back to the terminal; ending it")
		t.kill()
	}
}

// Client is one attached client of a terminal.
type Client struct {
	t      *Terminal
	out    chan []byte
	replay []byte
	err    error // set under t.mu when out is closed
}

// Replay is the scroll-back at the time the client attached: send it
// first.
func (c *Client) Replay() []byte { return c.replay }

// Output delivers the screen bytes after the replay; it is closed when
// the client is detached, replaced, too slow, or the terminal ended (Err
// says which).
func (c *Client) Output() <-chan []byte { return c.out }

// Err says why Output was closed.
func (c *Client) Err() error {
	c.t.mu.Lock()
	defer c.t.mu.Unlock()
	return c.err
}

// Write types p into the terminal. It never waits for the CLI to read:
// p is queued for the terminal's writer, and a client that has more
// waiting than Config.InputBuffer is cut off with ErrTooMuchInput, its
// last keystrokes not taken.
func (c *Client) Write(p []byte) error {
	t := c.t
	t.mu.Lock()
	switch {
	case c.err != nil:
		t.mu.Unlock()
		return c.err
	case t.ended || t.killed:
		t.mu.Unlock()
		return ErrEnded
	case t.inputBytes+len(p) > t.m.cfg.InputBuffer:
		waiting := t.inputBytes
		t.dropLocked(c, ErrTooMuchInput)
		t.mu.Unlock()
		t.log.Warn().Int("waiting", waiting).Int("typed", len(p)).Msg("the client typed more than the terminal holds; cut off")
		return ErrTooMuchInput
	}
	t.input = append(t.input, append([]byte(nil), p...))
	t.inputBytes += len(p)
	t.mu.Unlock()
	select {
	case t.typed <- struct{}{}:
	default: // the writer has a token already
	}
	return nil
}

// Resize sets the terminal's size in character cells.
func (c *Client) Resize(cols, rows int) error {
	if cols <= 0 || rows <= 0 || cols > 1000 || rows > 1000 {
		return fmt.Errorf("terminal size %dx%d is out of range", cols, rows)
	}
	if c.Err() != nil {
		return c.Err()
	}
	// Not pty.Setsize: asking the file for its descriptor would put it
	// back in blocking mode.
	raw, err := c.t.pty.SyscallConn()
	if err != nil {
		return ErrEnded
	}
	var ioctlErr error
	if err := raw.Control(func(fd uintptr) {
		ioctlErr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Col: uint16(cols), Row: uint16(rows)})
	}); err != nil {
		return ErrEnded // the pty is closed
	}
	if ioctlErr != nil {
		return fmt.Errorf("resize the terminal: %w", ioctlErr)
	}
	return nil
}

// End ends the terminal now, as its grace time running out would: the
// client is done with it and the conversation goes back to the app.
func (c *Client) End() { c.t.kill() }

// Detach lets the client go: the terminal stays alive for the grace time,
// for a client to attach again.
func (c *Client) Detach() {
	c.t.mu.Lock()
	defer c.t.mu.Unlock()
	if c.err == nil {
		c.t.dropLocked(c, errDetached)
	}
}

var errDetached = errors.New("the client detached")
