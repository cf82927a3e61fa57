package gateway

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// What one token's requests may hold of the gateway. Any process of a
// session has its token (ANTHROPIC_AUTH_TOKEN is in the sandbox's
// environment), so these bound what a process that is not the CLI can
// make the server keep, whatever it sends; the CLI stays far below them.
const (
	// DefaultBodyTimeout is how long a request's body may take to arrive
	// once its headers are in (Config.BodyTimeout). On loopback the CLI
	// sends the API's largest body in well under a second.
	DefaultBodyTimeout = 30 * time.Second
	// maxRequestsPerToken bounds the requests of one token in the gateway
	// at once, from their headers to the end of their answers: a turn's
	// own request, its subagents' and the CLI's small side requests.
	maxRequestsPerToken = 16
	// maxBodyBytesPerPerson bounds the bytes of one person's request
	// bodies the gateway holds at once (from before they are read until
	// they are sent upstream): one body of the API's largest size.
	maxBodyBytesPerPerson = maxRequestBody
	// maxBodyBytes bounds the bytes of all the request bodies the gateway
	// holds at once.
	maxBodyBytes = 4 * maxRequestBody
)

// errBodiesFull refuses a request whose body would take the gateway, or
// its person, past what their bodies may hold at once.
var errBodiesFull = errors.New("the model gateway holds as many request bodies as it may")

// errBodyTooLarge refuses a body over the API's own limit.
var errBodyTooLarge = fmt.Errorf("the request is larger than %d MB", maxRequestBody>>20)

// enterRequest counts a request of the token with hash key in, unless the
// token has maxRequestsPerToken in the gateway already; leave counts it
// out.
func (g *Gateway) enterRequest(key tokenKey) (leave func(), ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.requests[key] >= maxRequestsPerToken {
		return nil, false
	}
	g.requests[key]++
	return func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.requests[key]--; g.requests[key] <= 0 {
			delete(g.requests, key)
		}
	}, true
}

// reserve takes n bytes of what person's bodies, and all bodies, may
// hold; false if either would go past its bound. give returns them.
func (g *Gateway) reserve(person string, n int64) (give func(), ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.bodyBytes+n > maxBodyBytes || g.personBytes[person]+n > maxBodyBytesPerPerson {
		return nil, false
	}
	g.bodyBytes += n
	g.personBytes[person] += n
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.bodyBytes -= n
			if g.personBytes[person] -= n; g.personBytes[person] <= 0 {
				delete(g.personBytes, person)
			}
		})
	}, true
}

// readBody reads r's body whole, within the body timeout and the bounds on
// the bytes bodies hold, into a heldBody that gives its bytes back once it
// is sent upstream (or at the latest when the handler calls its free). A
// body over the bounds is read and thrown away, so its client reads the
// refusal: errBodiesFull.
func (g *Gateway) readBody(w http.ResponseWriter, r *http.Request, person string) (*heldBody, error) {
	rc := http.NewResponseController(w)
	// Not supported only outside net/http's server (no connection to
	// time out).
	_ = rc.SetReadDeadline(time.Now().Add(g.bodyTimeout))
	// Once the body is in, the connection is read again only to see the
	// client go: without a deadline, which would cancel the request.
	defer func() { _ = rc.SetReadDeadline(time.Time{}) }()
	n := r.ContentLength
	switch {
	case n > maxRequestBody:
		return nil, errBodyTooLarge
	case n < 0:
		n = maxRequestBody // chunked: its length shows only at its end
	}
	give, ok := g.reserve(person, n)
	if !ok {
		_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, maxRequestBody+1))
		return nil, errBodiesFull
	}
	var body []byte
	var err error
	if r.ContentLength >= 0 {
		// Exactly what the headers said, so the bytes held are the bytes
		// reserved; net/http ends the body there.
		body = make([]byte, n)
		_, err = io.ReadFull(r.Body, body)
	} else {
		body, err = io.ReadAll(io.LimitReader(r.Body, maxRequestBody+1))
		if err == nil && len(body) > maxRequestBody {
			err = errBodyTooLarge
		}
	}
	if err != nil {
		give()
		return nil, err
	}
	return &heldBody{b: body, give: give}, nil
}

// bodyError answers a request whose body was not read: too large, over
// the bounds, or not sent in time. The connection is closed after the
// answer: what is left of the body is not read.
func (g *Gateway) bodyError(w http.ResponseWriter, gr grant, err error) {
	w.Header().Set("Connection", "close")
	switch {
	case errors.Is(err, errBodyTooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, "request_too_large", err.Error())
	case errors.Is(err, errBodiesFull):
		g.log.Warn().Str("person", gr.person).Str("session", gr.session).Msg("refused a request: the request bodies held reached their bound")
		// The CLI tries again a moment later, as after any 503.
		w.Header().Set("x-should-retry", "true")
		writeError(w, http.StatusServiceUnavailable, "api_error", errBodiesFull.Error()+"; try again shortly")
	default:
		g.log.Warn().Err(err).Str("person", gr.person).Str("session", gr.session).Msg("a request's body was not read")
		writeError(w, http.StatusRequestTimeout, "invalid_request_error",
			fmt.Sprintf("the request body did not arrive whole within %s", g.bodyTimeout))
	}
}

// heldBody is a request body read whole. The transport reads it (again,
// for a request it resends: GetBody) and closes it; once one reading has
// sent all of it, its bytes are let go and given back to the bounds.
type heldBody struct {
	mu   sync.Mutex
	b    []byte // nil once let go
	give func()
}

// errBodyGone answers a resend of a body that was already sent whole: the
// transport resends only a request it could not write.
var errBodyGone = errors.New("the request body was sent and let go")

// reader is one reading of the body.
func (h *heldBody) reader() (io.ReadCloser, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.b == nil {
		return nil, errBodyGone
	}
	return &bodyReader{h: h}, nil
}

// free lets the bytes go and gives them back; it is idempotent.
func (h *heldBody) free() {
	h.mu.Lock()
	h.b = nil
	h.mu.Unlock()
	h.give()
}

// bodyReader is one reading of a heldBody.
type bodyReader struct {
	h   *heldBody
	off int
	eof bool
}

func (r *bodyReader) Read(p []byte) (int, error) {
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	if r.h.b == nil {
		return 0, errBodyGone
	}
	if r.off >= len(r.h.b) {
		r.eof = true
		return 0, io.EOF
	}
	n := copy(p, r.h.b[r.off:])
	r.off += n
	r.eof = r.off == len(r.h.b)
	return n, nil
}

// Close lets the body go if this reading sent all of it; a reading cut
// short keeps it for a resend.
func (r *bodyReader) Close() error {
	if r.eof {
		r.h.free()
	}
	return nil
}
