package hooks

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// What a terminal's hook commands may make the server hold. Every process
// in the terminal's sandbox has the socket and the token (SocketEnv,
// TokenEnv), so these bound whatever it sends; the CLI's own hooks stay far
// below them (a Write's whole content, the largest input, is what the
// model wrote in one answer).
const (
	// maxHookInput bounds one hook input.
	maxHookInput = 16 << 20
	// DefaultInputTimeout is how long a hook input may take to arrive
	// once its headers are in (CommandConfig.InputTimeout); `major hook`
	// has read it whole before it connects.
	DefaultInputTimeout = 30 * time.Second
	// maxInputsPerTerminal bounds the hook inputs of one terminal the
	// server takes at once (from their headers to their answers): the
	// CLI runs a hook per tool call, a few at once.
	maxInputsPerTerminal = 8
	// maxInputBytesPerTerminal and maxInputBytes bound the bytes of hook
	// inputs held at once, of one terminal and of all.
	maxInputBytesPerTerminal = 2 * maxHookInput
	maxInputBytes            = 8 * maxHookInput
)

var (
	errInputTooLarge = fmt.Errorf("hook input larger than %d MiB", maxHookInput>>20)
	errInputsFull    = errors.New("the server holds as many hook inputs of this terminal as it may")
)

// inputs counts the hook inputs the server holds, per terminal (by its
// token) and in all. It is guarded by Commands.mu.
type inputs struct {
	count map[string]int
	bytes map[string]int64
	total int64
}

// enter counts an input of the terminal with token in, unless it has
// maxInputsPerTerminal in already; leave counts it out.
func (s *Commands) enter(token string) (leave func(), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inputs.count[token] >= maxInputsPerTerminal {
		return nil, false
	}
	s.inputs.count[token]++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.inputs.count[token]--; s.inputs.count[token] <= 0 {
			delete(s.inputs.count, token)
		}
	}, true
}

// reserve takes n bytes of what the terminal's inputs, and all inputs, may
// hold; false if either would go past its bound. give returns them.
func (s *Commands) reserve(token string, n int64) (give func(), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inputs.total+n > maxInputBytes || s.inputs.bytes[token]+n > maxInputBytesPerTerminal {
		return nil, false
	}
	s.inputs.total += n
	s.inputs.bytes[token] += n
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.inputs.total -= n
		if s.inputs.bytes[token] -= n; s.inputs.bytes[token] <= 0 {
			delete(s.inputs.bytes, token)
		}
	}, true
}

// readInput reads r's hook input whole, within the input timeout and the
// bounds on the bytes inputs hold; give returns its bytes once the input
// is answered. An input over a bound is read and thrown away (within the
// timeout), so that the command reads the refusal.
func (s *Commands) readInput(w http.ResponseWriter, r *http.Request, token string) (input []byte, give func(), err error) {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(s.cfg.InputTimeout))
	defer func() { _ = rc.SetReadDeadline(time.Time{}) }()
	n := r.ContentLength
	if n < 0 {
		n = maxHookInput // chunked: its length shows only at its end
	}
	if n > maxHookInput {
		_, _ = io.Copy(io.Discard, r.Body)
		return nil, nil, errInputTooLarge
	}
	give, ok := s.reserve(token, n)
	if !ok {
		_, _ = io.Copy(io.Discard, r.Body)
		return nil, nil, errInputsFull
	}
	if r.ContentLength >= 0 {
		// Exactly what the headers said, so the bytes held are the bytes
		// reserved; net/http ends the body there.
		input = make([]byte, n)
		_, err = io.ReadFull(r.Body, input)
	} else {
		input, err = io.ReadAll(io.LimitReader(r.Body, maxHookInput+1))
		if err == nil && len(input) > maxHookInput {
			err = errInputTooLarge
		}
	}
	if err != nil {
		give()
		return nil, nil, err
	}
	return input, give, nil
}

// inputError answers a hook input that was not taken: too large, over the
// bounds, or not sent in time. The connection is closed after the answer.
func (s *Commands) inputError(w http.ResponseWriter, c Caller, err error) {
	w.Header().Set("Connection", "close")
	switch {
	case errors.Is(err, errInputTooLarge):
		http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
	case errors.Is(err, errInputsFull):
		s.log.Warn().Str("session", c.ID()).Msg("refused a hook input: the terminal's inputs held reached their bound")
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
	default:
		s.log.Warn().Err(err).Str("session", c.ID()).Msg("a hook input was not read")
		http.Error(w, fmt.Sprintf("the hook input did not arrive whole within %s", s.cfg.InputTimeout), http.StatusRequestTimeout)
	}
}
