package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// ProcessConfig describes one CLI process.
type ProcessConfig struct {
	Path string
	Args []string
	Dir  string
	// Env is the child's whole environment; see CleanEnv.
	Env      []string
	Handlers Handlers
	// OnMessage receives every line that is not control traffic, in order,
	// on the reader goroutine. It must not block for long.
	OnMessage func(*Message)
	// OnExit is called once, after the last OnMessage, when the process is
	// gone; err says why (nil for a clean exit after Close).
	OnExit func(err error)
	// Grace bounds each step of Close (stdin closed, SIGTERM); default 3s.
	Grace time.Duration
	// MaxLine bounds one line of the CLI's output (a longer one is
	// skipped); default DefaultMaxLine.
	MaxLine  int
	TailSize int // bytes of stderr kept for diagnostics; default 8 KiB
	Logger   zerolog.Logger
}

// Process owns one running claude process: its pipes, its process group,
// the control router and the one goroutine that reaps it.
type Process struct {
	cfg    ProcessConfig
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	router *router
	tail   *tailBuffer

	writeMu sync.Mutex
	closing chan struct{}
	once    sync.Once
	done    chan struct{}
	exitErr error
}

// StartProcess starts the CLI in its own process group.
func StartProcess(cfg ProcessConfig) (*Process, error) {
	if cfg.Grace <= 0 {
		cfg.Grace = 3 * time.Second
	}
	if cfg.TailSize <= 0 {
		cfg.TailSize = 8 << 10
	}
	cmd := exec.Command(cfg.Path, cfg.Args...)
	cmd.Dir = cfg.Dir
	cmd.Env = cfg.Env
	cmd.SysProcAttr = sysProcAttr()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("start claude: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("start claude: %w", err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, fmt.Errorf("start claude: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start claude: %w", err)
	}
	p := &Process{
		cfg: cfg, cmd: cmd, stdin: stdin,
		tail:    newTailBuffer(cfg.TailSize),
		closing: make(chan struct{}),
		done:    make(chan struct{}),
	}
	p.router = newRouter(cfg.Handlers, p.writeJSON, cfg.Logger)
	cfg.Logger.Debug().Int("pid", cmd.Process.Pid).Str("dir", cfg.Dir).Msg("claude started")

	readDone := make(chan struct{})
	errDone := make(chan struct{})
	go func() {
		defer close(readDone)
		p.readLoop(stdout)
	}()
	go func() {
		defer close(errDone)
		_, _ = io.Copy(p.tail, stderr)
	}()
	go p.reap(readDone, errDone, exitWatch(cmd.Process.Pid))
	return p, nil
}

// Pid is the process id, which is also its process group id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited and been reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is why the process ended; valid after Done is closed.
func (p *Process) Err() error {
	<-p.done
	return p.exitErr
}

// StderrTail returns the last bytes the process wrote to stderr.
func (p *Process) StderrTail() string { return p.tail.String() }

// Request sends a control request to the CLI and waits for its answer.
func (p *Process) Request(ctx context.Context, subtype string, body map[string]any) (json.RawMessage, error) {
	return p.router.request(ctx, subtype, body)
}

// Priority says when the CLI hands a user message to the model, relative
// to the turn it may be running. Every message the server writes names
// one: a message without it joins a running turn, as PriorityNext does.
type Priority string

// The priorities of the CLI's stream-json input (2.1.332).
const (
	// PriorityNow interrupts the running turn and answers the message at
	// once.
	PriorityNow Priority = "now"
	// PriorityNext hands the message to the model at the running turn's
	// next request, without stopping running tools; a turn that makes no
	// further request takes it in as a turn of its own right after.
	PriorityNext Priority = "next"
	// PriorityLater runs the message as a turn of its own once the
	// running turn (if any) has ended; with no turn running, at once.
	PriorityLater Priority = "later"
)

// SendUser writes one user message with a priority; uuid, when set, is
// its id in the conversation (file checkpoints are keyed by it, and the
// CLI's command_lifecycle messages name it). blocks, when there are any,
// are content blocks (image, document, text, in the Messages API's
// format) that come before the text in the message.
func (p *Process) SendUser(text string, blocks []json.RawMessage, uuid string, priority Priority) error {
	_, err := p.sendUserIf(text, blocks, uuid, priority, nil)
	return err
}

// userContent is a user message's content: the text alone, as the CLI's
// own clients send it, or the blocks and then the text as a text block.
func userContent(text string, blocks []json.RawMessage) any {
	if len(blocks) == 0 {
		return text
	}
	content := make([]any, 0, len(blocks)+1)
	for _, b := range blocks {
		content = append(content, b)
	}
	if text == "" {
		return content // the API refuses an empty text block
	}
	return append(content, map[string]string{"type": "text", "text": text})
}

// sendUserIf writes one user message if ok (nil: always) holds, asked
// right before the write with the write lock held: until the write is
// done the process cannot be reaped, so what ok saw of it still holds.
// It reports whether the message was written.
func (p *Process) sendUserIf(text string, blocks []json.RawMessage, uuid string, priority Priority, ok func() bool) (bool, error) {
	msg := map[string]any{
		"type":               "user",
		"message":            map[string]any{"role": "user", "content": userContent(text, blocks)},
		"parent_tool_use_id": nil,
		"session_id":         "",
		"priority":           priority,
	}
	if uuid != "" {
		msg["uuid"] = uuid
	}
	return p.writeIf(msg, ok)
}

func (p *Process) writeJSON(v any) error {
	_, err := p.writeIf(v, nil)
	return err
}

// writeIf writes v as one line if ok (nil: always) holds under the write
// lock, and reports whether it did.
func (p *Process) writeIf(v any, ok func() bool) (bool, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return false, err
	}
	b = append(b, '\n')
	p.writeMu.Lock()
	defer p.writeMu.Unlock()
	select {
	case <-p.done:
		return false, ErrProcessExited
	default:
	}
	if ok != nil && !ok() {
		return false, nil
	}
	if _, err := p.stdin.Write(b); err != nil {
		return false, fmt.Errorf("write to claude: %w", err)
	}
	return true, nil
}

func (p *Process) readLoop(stdout io.Reader) {
	f := NewFramer(stdout, p.cfg.MaxLine)
	for {
		line, err := f.Next()
		if errors.Is(err, ErrLineTooLong) {
			p.cfg.Logger.Warn().Err(err).Msg("skipped cli output line")
			continue
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrClosed) {
				p.cfg.Logger.Warn().Err(err).Msg("read cli output")
			}
			return
		}
		msg, err := DecodeMessage(line)
		if err != nil {
			p.cfg.Logger.Warn().Err(err).Int("bytes", len(line)).Msg("cli wrote a line that is not a message")
			continue
		}
		switch msg.Type {
		case "control_request":
			p.router.dispatch(msg.RequestID, msg.Request, len(line))
		case "control_response":
			if msg.Response == nil || !p.router.deliver(msg.Response) {
				p.cfg.Logger.Debug().Msg("control response for no pending request")
			}
		case "control_cancel_request":
			p.router.cancel(msg.RequestID)
		default:
			if p.cfg.OnMessage != nil {
				p.cfg.OnMessage(msg)
			}
		}
	}
}

// drainAfterExit bounds how long reap reads stdout and stderr once the
// process has exited and its group is gone. What the process wrote is in
// the pipes by then, and the group's members die at once: only a process
// that left the group (setsid; possible without the sandbox, whose PID
// namespace dies with bwrap) can still hold the pipes, and it must not
// keep the slot and the session from being given back.
const drainAfterExit = 500 * time.Millisecond

// reap is the one goroutine that waits for the process. exited, when the
// platform can tell (nil otherwise), is closed once the process has
// exited, before it is reaped.
func (p *Process) reap(readDone, errDone, exited <-chan struct{}) {
	// stdout ends when every holder of it is gone, normally as the
	// process exits. Otherwise the exit is what counts.
	select {
	case <-readDone:
	case <-exited:
	}
	if exited != nil {
		<-exited
		// The group goes with its leader (the CLI, or bwrap). Unreaped,
		// the leader keeps the group's id from being reused.
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	}
	late := make(chan struct{})
	drain := time.AfterFunc(drainAfterExit, func() { close(late) })
	defer drain.Stop()
	for _, d := range []<-chan struct{}{readDone, errDone} {
		select {
		case <-d:
		case <-late:
		}
	}
	// Wait closes our ends of the pipes (exec.Cmd's StdoutPipe and
	// StderrPipe), which ends a read still waiting on a holder outside
	// the group: nothing is read after this.
	err := p.cmd.Wait()
	if exited == nil {
		// The CLI may leave children in its group; they go with it.
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	}
	<-readDone
	<-errDone

	closing := false
	select {
	case <-p.closing:
		closing = true
	default:
	}
	switch {
	case closing:
		err = nil
	case err == nil:
		err = fmt.Errorf("%w with status 0", ErrProcessExited)
	default:
		err = fmt.Errorf("%w: %v", ErrProcessExited, err)
	}
	if err != nil {
		if tail := strings.TrimSpace(p.tail.String()); tail != "" {
			err = fmt.Errorf("%w (stderr: %s)", err, lastLines(tail, 5))
		}
	}
	p.writeMu.Lock()
	p.exitErr = err
	close(p.done)
	p.writeMu.Unlock()
	p.router.close(ErrProcessExited)
	p.cfg.Logger.Debug().Int("pid", p.cmd.Process.Pid).AnErr("exit", err).Msg("claude exited")
	if p.cfg.OnExit != nil {
		p.cfg.OnExit(err)
	}
}

// Close stops the process: stdin closed, then SIGTERM to the group, then
// SIGKILL, each step bounded by Grace. It is idempotent and safe to call
// after the process has exited on its own.
func (p *Process) Close() error {
	p.once.Do(func() {
		close(p.closing)
		// Not under writeMu: closing the pipe also unblocks a stuck Write.
		_ = p.stdin.Close()
		if p.waitDone(p.cfg.Grace) {
			return
		}
		_ = syscall.Kill(-p.Pid(), syscall.SIGTERM)
		if p.waitDone(p.cfg.Grace) {
			return
		}
		_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
		p.waitDone(p.cfg.Grace)
	})
	select {
	case <-p.done:
		return nil
	default:
		return fmt.Errorf("claude pid %d did not exit", p.Pid())
	}
}

// Kill ends the whole process group at once, without the polite steps.
func (p *Process) Kill() {
	_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
}

func (p *Process) waitDone(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		return false
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func newTailBuffer(max int) *tailBuffer { return &tailBuffer{max: max} }

func (t *tailBuffer) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(b), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// CleanEnv returns env without the variables that would make the child think
// it runs inside another Claude Code, or that carry this server's own
// settings and secrets (MAJOR_*), plus extra, plus the CLI's switches that
// keep it from updating itself: the server runs the binary it was started
// with, and a CLI that replaces itself under running sessions is not that.
func CleanEnv(env []string, extra ...string) []string {
	out := make([]string, 0, len(env)+len(extra)+len(noUpdates))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case k == "CLAUDECODE", k == "CLAUDE_CODE_ENTRYPOINT", k == "CLAUDE_CODE_SSE_PORT",
			k == "CLAUDE_AGENT_SDK_VERSION", k == "CLAUDE_CODE_SESSION_ID",
			strings.HasPrefix(k, "MAJOR_"), updateSwitch(k):
			continue
		}
		out = append(out, kv)
	}
	for _, kv := range extra {
		if k, _, _ := strings.Cut(kv, "="); !updateSwitch(k) {
			out = append(out, kv)
		}
	}
	return append(out, noUpdates...)
}

func updateSwitch(key string) bool {
	return key == "DISABLE_AUTOUPDATER" || key == "DISABLE_UPDATES" || key == "CLAUDE_CODE_PACKAGE_MANAGER_AUTO_UPDATE"
}

// noUpdates turn off the CLI's updates: DISABLE_AUTOUPDATER the background
// one, DISABLE_UPDATES every one (the pinned CLI checks it first).
// CLAUDE_CODE_PACKAGE_MANAGER_AUTO_UPDATE, which would turn a package
// manager's update on, is never passed.
var noUpdates = []string{"DISABLE_AUTOUPDATER=1", "DISABLE_UPDATES=1"}
