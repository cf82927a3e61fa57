package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/rs/zerolog"
)

// Handlers answer the control requests the CLI sends. A nil field means
// nobody handles that subtype: the CLI gets an error response, never silence.
// Each request runs in its own goroutine with a context that is cancelled
// when the CLI cancels the request or the process exits; at most
// MaxControlRequests of one process, of MaxControlBytes together, run at
// once.
type Handlers struct {
	CanUseTool   func(ctx context.Context, req *ControlRequest) (PermissionResult, error)
	HookCallback func(ctx context.Context, req *ControlRequest) (json.RawMessage, error)
	MCPMessage   func(ctx context.Context, server string, msg json.RawMessage) (json.RawMessage, error)
}

// PermissionResult answers can_use_tool.
type PermissionResult struct {
	Allow        bool
	UpdatedInput json.RawMessage // with Allow: the input to run with
	Message      string          // with deny: shown to the model
	Interrupt    bool            // with deny: also stop the turn
}

// MarshalJSON writes the CLI's shape: {"behavior":"allow","updatedInput":…}
// or {"behavior":"deny","message":…}.
func (p PermissionResult) MarshalJSON() ([]byte, error) {
	if p.Allow {
		in := p.UpdatedInput
		if len(in) == 0 {
			in = json.RawMessage("{}")
		}
		return json.Marshal(struct {
			Behavior     string          `json:"behavior"`
			UpdatedInput json.RawMessage `json:"updatedInput"`
		}{"allow", in})
	}
	return json.Marshal(struct {
		Behavior  string `json:"behavior"`
		Message   string `json:"message"`
		Interrupt bool   `json:"interrupt,omitempty"`
	}{"deny", p.Message, p.Interrupt})
}

// ControlError is an error response from the CLI to one of our requests.
type ControlError struct {
	Subtype string
	Message string
}

func (e *ControlError) Error() string {
	return fmt.Sprintf("cli answered %s with error: %s", e.Subtype, e.Message)
}

// ErrProcessExited is returned for requests that were pending, or made, when
// the CLI process was gone.
var ErrProcessExited = errors.New("claude process exited")

// MaxControlRequests bounds the control requests of one process being
// answered at once. The CLI asks one per tool call (its permission, its
// hooks) and per call of an SDK MCP tool, a few at once even with
// subagents running side by side, and a permission may wait for the
// person; anything in the sandbox can write requests onto the CLI's
// output too, so one more is answered with an error at once.
const MaxControlRequests = 64

// MaxControlBytes bounds the bytes of the control requests of one process
// being answered at once, as they were written: each is held until
// answered (a question or permission up to its timeout), and a line may
// be 64 MiB. The CLI's own are far smaller (a tool's input, which the
// model wrote); one that would pass the bound is answered with an error
// at once, like one past MaxControlRequests.
const MaxControlBytes = 8 << 20

// router matches our outgoing control requests to the CLI's responses and
// dispatches the CLI's requests to Handlers.
type router struct {
	handlers Handlers
	write    func(v any) error
	log      zerolog.Logger

	mu       sync.Mutex
	next     int
	pending  map[string]chan *ControlResponse
	inflight map[string]context.CancelFunc
	closed   error
	wg       sync.WaitGroup
	base     context.Context
	stop     context.CancelFunc
	// running counts the requests being answered (inflight has one entry
	// per id, and nothing makes the CLI's ids unique) and holding their
	// bytes; refused those answered with an error for being past
	// MaxControlRequests or MaxControlBytes.
	running, refused int
	holding          int64
}

func newRouter(h Handlers, write func(v any) error, log zerolog.Logger) *router {
	base, stop := context.WithCancel(context.Background())
	return &router{
		handlers: h, write: write, log: log, base: base, stop: stop,
		pending:  make(map[string]chan *ControlResponse),
		inflight: make(map[string]context.CancelFunc),
	}
}

// request sends a control request and waits for its response.
func (r *router) request(ctx context.Context, subtype string, body map[string]any) (json.RawMessage, error) {
	r.mu.Lock()
	if r.closed != nil {
		r.mu.Unlock()
		return nil, r.closed
	}
	r.next++
	id := fmt.Sprintf("req_%d_%s", r.next, subtype)
	ch := make(chan *ControlResponse, 1)
	r.pending[id] = ch
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.pending, id)
		r.mu.Unlock()
	}()

	req := map[string]any{"subtype": subtype}
	for k, v := range body {
		req[k] = v
	}
	if err := r.write(map[string]any{"type": "control_request", "request_id": id, "request": req}); err != nil {
		return nil, fmt.Errorf("send %s: %w", subtype, err)
	}
	select {
	case resp, ok := <-ch:
		if !ok {
			return nil, r.closedErr()
		}
		if resp.Subtype == "error" {
			return nil, &ControlError{Subtype: subtype, Message: resp.Error}
		}
		return resp.Response, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("%s: %w", subtype, ctx.Err())
	}
}

func (r *router) closedErr() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

// deliver hands a control_response to the request waiting for it.
func (r *router) deliver(resp *ControlResponse) bool {
	r.mu.Lock()
	ch, ok := r.pending[resp.RequestID]
	delete(r.pending, resp.RequestID)
	r.mu.Unlock()
	if ok {
		ch <- resp
	}
	return ok
}

// cancel cancels the handler of a request the CLI no longer waits for.
func (r *router) cancel(requestID string) {
	r.mu.Lock()
	c := r.inflight[requestID]
	r.mu.Unlock()
	if c != nil {
		c()
	}
}

// errTooManyRequests answers a control request past MaxControlRequests
// or MaxControlBytes.
var errTooManyRequests = fmt.Errorf("more than %d control requests or %d MiB of them at once", MaxControlRequests, MaxControlBytes>>20)

// dispatch answers one control request from the CLI, size bytes as it
// was written, in its own goroutine; one past MaxControlRequests or
// MaxControlBytes is answered with an error at once, by the caller (the
// process's reader: its output waits meanwhile).
func (r *router) dispatch(id string, req *ControlRequest, size int) {
	r.mu.Lock()
	if r.closed != nil {
		r.mu.Unlock()
		return
	}
	if r.running >= MaxControlRequests || r.holding+int64(size) > MaxControlBytes {
		r.refused++
		n := r.refused
		r.mu.Unlock()
		// The first, then one in 1,024: a flood of them is not a flood of
		// the log too.
		if n%1024 == 1 {
			r.log.Warn().Int("refused", n).Int("limit", MaxControlRequests).Int("bytes", size).Str("subtype", subtypeOf(req)).
				Msg("refused a control request from the CLI's output: too many at once")
		}
		_ = r.write(controlAnswer(id, nil, errTooManyRequests))
		return
	}
	ctx, cancel := context.WithCancel(r.base)
	r.inflight[id] = cancel
	r.running++
	r.holding += int64(size)
	r.wg.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.wg.Done()
		defer func() {
			r.mu.Lock()
			delete(r.inflight, id)
			r.running--
			r.holding -= int64(size)
			r.mu.Unlock()
			cancel()
		}()
		resp, err := r.handle(ctx, req)
		if err == nil && ctx.Err() != nil {
			err = fmt.Errorf("%s cancelled", req.Subtype)
		}
		_ = r.write(controlAnswer(id, resp, err))
	}()
}

func (r *router) handle(ctx context.Context, req *ControlRequest) (any, error) {
	h := r.handlers
	switch {
	case req == nil:
		return nil, errors.New("control request has no body")
	case req.Subtype == "can_use_tool" && h.CanUseTool != nil:
		return h.CanUseTool(ctx, req)
	case req.Subtype == "hook_callback" && h.HookCallback != nil:
		out, err := h.HookCallback(ctx, req)
		if err == nil && len(out) == 0 {
			out = json.RawMessage(`{"continue":true}`)
		}
		return out, err
	case req.Subtype == "mcp_message" && h.MCPMessage != nil:
		out, err := h.MCPMessage(ctx, req.ServerName, req.MCPMessage)
		if err != nil {
			return nil, err
		}
		return map[string]json.RawMessage{"mcp_response": out}, nil
	default:
		return nil, fmt.Errorf("unsupported control request subtype %q", req.Subtype)
	}
}

// subtypeOf is req's subtype, for the log.
func subtypeOf(req *ControlRequest) string {
	if req == nil {
		return ""
	}
	return req.Subtype
}

func controlAnswer(id string, resp any, err error) map[string]any {
	if err != nil {
		return map[string]any{"type": "control_response", "response": map[string]any{
			"subtype": "error", "request_id": id, "error": err.Error()}}
	}
	if resp == nil {
		resp = map[string]any{}
	}
	return map[string]any{"type": "control_response", "response": map[string]any{
		"subtype": "success", "request_id": id, "response": resp}}
}

// close fails every pending request with err and cancels every handler.
func (r *router) close(err error) {
	r.mu.Lock()
	if r.closed != nil {
		r.mu.Unlock()
		return
	}
	r.closed = err
	for id, ch := range r.pending {
		close(ch)
		delete(r.pending, id)
	}
	r.mu.Unlock()
	r.stop()
	r.wg.Wait()
}
