// Package standin is a fast stand-in for the Claude Code CLI, for load tests
// and benchmarks of the relay and supervisor plumbing: it starts in
// milliseconds, needs no model and costs a few megabytes, so fifty sessions
// fit on a small machine.
//
// It speaks the CLI's stream-json protocol (shared/PROTOCOL.md) only as far
// as the supervisor needs: it answers initialize and interrupt, and answers
// each user message with system/init, stream_event text deltas, an
// assistant message and a result. It is not evidence of how the real CLI
// behaves; the tests that drive the pinned CLI against the scripted model
// remain the proof of protocol behaviour.
//
// A user message steers the turn with words of the form key:value:
//
//	deltas:50    number of text deltas (default 5)
//	size:32      bytes of text per delta (default 16)
//	delay:2ms    pause before each delta (default none)
//	stamp:1      each delta's text starts with the wall-clock time in
//	             nanoseconds and a space, to measure delivery latency
//	exit:1       exit with status 3 instead of answering (a crash)
package standin

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrCrash is returned by Run for a turn that asked for exit:1; the binary
// exits with status 3 then.
var ErrCrash = errors.New("standin: crash requested")

// Options are read from the command line; everything else there is ignored,
// so the supervisor's full CLI command line is accepted.
type Options struct {
	// Resume is the session id given with --resume; it becomes the
	// session id of every turn.
	Resume string
}

// ParseArgs reads the flags the stand-in understands from args.
func ParseArgs(args []string) Options {
	var o Options
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "--resume" && i+1 < len(args):
			o.Resume = args[i+1]
			i++
		case strings.HasPrefix(a, "--resume="):
			o.Resume = strings.TrimPrefix(a, "--resume=")
		}
	}
	return o
}

// TurnSpec is what a user message asks of its turn.
type TurnSpec struct {
	Deltas int
	Size   int
	Delay  time.Duration
	Stamp  bool
	Exit   bool
}

// ParseTurn reads the key:value words of a user message; unknown words and
// bad values are ignored, so any text is a valid message.
func ParseTurn(text string) TurnSpec {
	t := TurnSpec{Deltas: 5, Size: 16}
	for _, w := range strings.Fields(text) {
		k, v, ok := strings.Cut(w, ":")
		if !ok {
			continue
		}
		switch k {
		case "deltas":
			if n, err := strconv.Atoi(v); err == nil && n >= 0 && n <= 1_000_000 {
				t.Deltas = n
			}
		case "size":
			if n, err := strconv.Atoi(v); err == nil && n >= 1 && n <= 16<<20 {
				t.Size = n
			}
		case "delay":
			if d, err := time.ParseDuration(v); err == nil && d >= 0 {
				t.Delay = d
			}
		case "stamp":
			t.Stamp = v == "1" || v == "true"
		case "exit":
			t.Exit = v == "1" || v == "true"
		}
	}
	return t
}

// input is one line the supervisor writes.
type input struct {
	Type      string `json:"type"`
	RequestID string `json:"request_id"`
	Request   *struct {
		Subtype string `json:"subtype"`
	} `json:"request"`
	Message *struct {
		Content json.RawMessage `json:"content"`
	} `json:"message"`
}

// text is the message content as plain text (a string, or text blocks).
func (in *input) text() string {
	if in.Message == nil || len(in.Message.Content) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(in.Message.Content, &s) == nil {
		return s
	}
	var blocks []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	_ = json.Unmarshal(in.Message.Content, &blocks)
	var sb strings.Builder
	for _, b := range blocks {
		if b.Type == "text" {
			sb.WriteString(b.Text)
		}
	}
	return sb.String()
}

// cli is the state of one stand-in process.
type cli struct {
	out       *bufio.Writer
	sessionID string
	turns     int
	msgs      int
}

// Run speaks the protocol on stdin and stdout until stdin ends (nil),
// writing fails or a turn asks for a crash (ErrCrash). Turns run one at a
// time, in order; an interrupt that arrives while a turn streams ends that
// turn early. Run closes stdin before it returns, to stop its reader, and
// waits for the reader: stdin's Close must unblock a pending Read.
func Run(opts Options, stdin io.ReadCloser, stdout io.Writer) error {
	c := &cli{out: bufio.NewWriterSize(stdout, 64<<10), sessionID: opts.Resume}
	if c.sessionID == "" {
		c.sessionID = newID()
	}
	lines := make(chan *input, 64)
	readErr := make(chan error, 1)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		readErr <- readInputs(stdin, lines, stop)
	}()
	defer func() {
		close(stop)
		_ = stdin.Close()
		wg.Wait()
	}()

	var queue []*input // user messages waiting for their turn
	for {
		var in *input
		if len(queue) > 0 {
			in, queue = queue[0], queue[1:]
		} else {
			var ok bool
			in, ok = <-lines
			if !ok {
				return <-readErr
			}
		}
		switch in.Type {
		case "user":
			spec := ParseTurn(in.text())
			if spec.Exit {
				return ErrCrash
			}
			var err error
			queue, err = c.turn(spec, lines, queue)
			if err != nil {
				return err
			}
		case "control_request":
			if err := c.control(in); err != nil {
				return err
			}
		}
	}
}

// readInputs decodes stdin lines onto lines until EOF or stop; lines that
// are not JSON objects are ignored, as the CLI ignores what it cannot parse.
func readInputs(r io.Reader, lines chan<- *input, stop <-chan struct{}) error {
	defer close(lines)
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		b, err := br.ReadBytes('\n')
		if len(strings.TrimSpace(string(b))) > 0 {
			var in input
			if json.Unmarshal(b, &in) == nil {
				select {
				case lines <- &in:
				case <-stop:
					return nil
				}
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read stdin: %w", err)
		}
	}
}

// control answers one control request; ending a turn on interrupt is the
// caller's part.
func (c *cli) control(in *input) error {
	subtype := ""
	if in.Request != nil {
		subtype = in.Request.Subtype
	}
	var resp any
	switch subtype {
	case "initialize":
		resp = map[string]any{
			"commands": []any{}, "models": []any{},
			"account": map[string]any{"subscriptionType": "standin"},
		}
	case "interrupt":
		resp = map[string]any{"still_queued": []any{}}
	case "set_permission_mode", "set_model":
		resp = map[string]any{}
	default:
		if err := c.write(map[string]any{"type": "control_response", "response": map[string]any{
			"subtype": "error", "request_id": in.RequestID,
			"error": "standin: unsupported control request " + strconv.Quote(subtype)}}); err != nil {
			return err
		}
		return c.out.Flush()
	}
	if err := c.write(map[string]any{"type": "control_response", "response": map[string]any{
		"subtype": "success", "request_id": in.RequestID, "response": resp}}); err != nil {
		return err
	}
	return c.out.Flush()
}

// turn streams one answer. Lines that arrive meanwhile are handled: control
// requests at once, user messages queued for later turns.
func (c *cli) turn(spec TurnSpec, lines <-chan *input, queue []*input) ([]*input, error) {
	c.turns++
	c.msgs++
	start := time.Now()
	msgID := fmt.Sprintf("msg_standin_%s_%d", c.sessionID[:min(8, len(c.sessionID))], c.msgs)
	sid := c.sessionID
	if err := c.write(map[string]any{
		"type": "system", "subtype": "init", "session_id": sid, "cwd": "", "model": "standin",
		"tools": []string{}, "mcp_servers": []any{}, "permissionMode": "default",
	}); err != nil {
		return queue, err
	}
	ev := func(e map[string]any) error {
		return c.write(map[string]any{"type": "stream_event", "event": e, "session_id": sid, "parent_tool_use_id": nil})
	}
	if err := ev(map[string]any{"type": "message_start", "message": map[string]any{
		"id": msgID, "type": "message", "role": "assistant", "model": "standin", "content": []any{}}}); err != nil {
		return queue, err
	}
	if err := ev(map[string]any{"type": "content_block_start", "index": 0,
		"content_block": map[string]any{"type": "text", "text": ""}}); err != nil {
		return queue, err
	}
	if err := c.out.Flush(); err != nil {
		return queue, err
	}

	var text strings.Builder
	filler := strings.Repeat("abcdefghijklmnopqrstuvwxyz012345", spec.Size/32+1)[:spec.Size]
	var timer *time.Timer
	if spec.Delay > 0 {
		timer = time.NewTimer(spec.Delay)
		defer timer.Stop()
	}
	interrupted := false
	for i := 0; i < spec.Deltas && !interrupted; i++ {
		var tick <-chan time.Time
		if timer != nil {
			timer.Reset(spec.Delay)
			tick = timer.C
		}
		// Handle what arrived meanwhile; with a delay, until the tick.
		for !interrupted {
			var in *input
			got, ok := false, false
			if tick == nil {
				select {
				case in, ok = <-lines:
					got = true
				default:
				}
			} else {
				select {
				case in, ok = <-lines:
					got = true
				case <-tick:
				}
			}
			if !got {
				break
			}
			if !ok {
				lines = nil // stdin ended mid-turn: the turn still finishes
				continue
			}
			switch in.Type {
			case "user":
				queue = append(queue, in)
			case "control_request":
				if err := c.control(in); err != nil {
					return queue, err
				}
				interrupted = in.Request != nil && in.Request.Subtype == "interrupt"
			}
		}
		if interrupted {
			break
		}
		piece := filler
		if spec.Stamp {
			piece = strconv.FormatInt(time.Now().UnixNano(), 10) + " " + filler
		}
		text.WriteString(piece)
		if err := ev(map[string]any{"type": "content_block_delta", "index": 0,
			"delta": map[string]any{"type": "text_delta", "text": piece}}); err != nil {
			return queue, err
		}
		if err := c.out.Flush(); err != nil {
			return queue, err
		}
	}
	if err := c.write(map[string]any{"type": "assistant", "session_id": sid, "parent_tool_use_id": nil,
		"message": map[string]any{"id": msgID, "type": "message", "role": "assistant", "model": "standin",
			"content": []any{map[string]any{"type": "text", "text": text.String()}}}}); err != nil {
		return queue, err
	}
	if err := ev(map[string]any{"type": "content_block_stop", "index": 0}); err != nil {
		return queue, err
	}
	stopReason := "end_turn"
	if interrupted {
		stopReason = "interrupted"
	}
	if err := ev(map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stopReason},
		"usage": map[string]any{"output_tokens": spec.Deltas}}); err != nil {
		return queue, err
	}
	if err := ev(map[string]any{"type": "message_stop"}); err != nil {
		return queue, err
	}
	result := map[string]any{
		"type": "result", "subtype": "success", "is_error": false, "result": text.String(),
		"session_id": sid, "num_turns": c.turns, "duration_ms": time.Since(start).Milliseconds(),
		"total_cost_usd": 0, "usage": map[string]any{"output_tokens": spec.Deltas},
		"terminal_reason": "completed",
	}
	if interrupted {
		result["subtype"] = "error_during_execution"
		result["is_error"] = true
		result["result"] = ""
		result["terminal_reason"] = "aborted_streaming"
	}
	if err := c.write(result); err != nil {
		return queue, err
	}
	return queue, c.out.Flush()
}

func (c *cli) write(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := c.out.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("write stdout: %w", err)
	}
	return nil
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
