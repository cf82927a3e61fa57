package httpapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/coder/websocket"
	"github.com/gin-gonic/gin"

	"github.com/majorhq/major/terminal"
)

// TerminalProtocol is the WebSocket subprotocol of the terminal endpoint.
// A browser, which cannot set headers on a WebSocket, offers its token and
// person as two more subprotocols: "bearer.<token, base64url>" and
// "person.<name>"; the server answers with TerminalProtocol only.
const TerminalProtocol = "major.v1"

// Terminals runs the terminals of the sessions; *terminal.Manager
// satisfies it.
type Terminals interface {
	// CanAttach reports what Attach would refuse now, changing nothing.
	CanAttach(id string, chat terminal.Chat) error
	Attach(ctx context.Context, id, person string, chat terminal.Chat) (*terminal.Client, error)
	// End ends the terminal of a session that was cleared.
	End(id string) bool
}

var _ Terminals = (*terminal.Manager)(nil)

// terminalControl is a text message from the client.
type terminalControl struct {
	Type string `json:"type"`
	Cols int    `json:"cols"`
	Rows int    `json:"rows"`
	Data string `json:"data"`
}

// subprotocols are the subprotocols a WebSocket request offers.
func subprotocols(r *http.Request) []string {
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		return nil
	}
	var out []string
	for _, v := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(v, ",") {
			out = append(out, strings.TrimSpace(p))
		}
	}
	return out
}

// websocketCredentials are the token and person a WebSocket request
// offers as subprotocols, if any.
func websocketCredentials(r *http.Request) (token, person string) {
	for _, p := range subprotocols(r) {
		if b, ok := strings.CutPrefix(p, "bearer."); ok {
			if raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(b, "=")); err == nil {
				token = string(raw)
			}
		}
		if n, ok := strings.CutPrefix(p, "person."); ok {
			person = n
		}
	}
	return token, person
}

// terminal attaches the client to the session's terminal over a
// WebSocket: binary messages are keystrokes in and screen bytes out, text
// messages are JSON controls ({"type":"resize","cols","rows"},
// {"type":"input","data"}, {"type":"close"}: end the terminal now). A
// client attaching again within the grace time gets the scroll-back
// first.
//
// Every check (token, person and session, the page's origin, the
// subprotocol, whether the chat would hand its conversation over, the
// handshake) is made and the connection upgraded before the terminal is
// started: a refused request starts no process, takes no slot and tells
// the chat's clients nothing. What only Attach can find (a turn started
// meanwhile, no process slot) closes the upgraded connection with 4000 +
// the HTTP status it stands for.
func (s *Server) terminal(c *gin.Context) {
	chat, ok := s.session(c)
	if !ok {
		return
	}
	if s.cfg.Unsandboxed != "" {
		s.fail(c, &apiError{http.StatusServiceUnavailable, "the terminal is off: " + s.cfg.Unsandboxed})
		return
	}
	if s.cfg.Terminals == nil {
		s.fail(c, &apiError{http.StatusNotFound, "terminals are not available on this server"})
		return
	}
	if !strings.EqualFold(c.GetHeader("Upgrade"), "websocket") {
		s.fail(c, badRequest("the terminal is a WebSocket: send an upgrade request"))
		return
	}
	if err := s.terminalOrigin(c.Request); err != nil {
		s.fail(c, err)
		return
	}
	if !slices.ContainsFunc(subprotocols(c.Request), func(p string) bool { return strings.EqualFold(p, TerminalProtocol) }) {
		s.fail(c, badRequest("offer the terminal's subprotocol %s (Sec-WebSocket-Protocol)", TerminalProtocol))
		return
	}
	if err := s.cfg.Terminals.CanAttach(chat.ID, chat); err != nil {
		s.fail(c, err)
		return
	}
	ws, err := websocket.Accept(c.Writer, c.Request, &websocket.AcceptOptions{
		Subprotocols:   []string{TerminalProtocol},
		OriginPatterns: s.originHosts(),
	})
	if err != nil {
		return // Accept answered the client; nothing was started
	}
	client, err := s.cfg.Terminals.Attach(c.Request.Context(), chat.ID, personOf(c), chat)
	if err != nil {
		status, msg, _ := s.statusOf(err, c.Request.URL.Path)
		_ = ws.Close(websocket.StatusCode(4000+status), closeReason(msg))
		return
	}
	defer client.Detach()
	ws.SetReadLimit(1 << 20)
	ctx, cancel := context.WithCancel(c.Request.Context())
	defer cancel()
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		defer cancel()
		s.terminalInput(ctx, ws, client)
	}()
	code, reason := s.terminalOutput(ctx, ws, client)
	_ = ws.Close(code, reason)
	cancel()
	<-readDone
}

// terminalInput types the client's keystrokes and applies its controls
// until the connection ends. Typing never waits for the CLI to read
// (Client.Write queues), so a close, or the client going away, is seen
// at once; a refused keystroke ends the client's output (too much typed,
// the terminal ending), and terminalOutput closes the connection with the
// reason.
func (s *Server) terminalInput(ctx context.Context, ws *websocket.Conn, client *terminal.Client) {
	for {
		typ, data, err := ws.Read(ctx)
		if err != nil {
			return
		}
		if typ == websocket.MessageBinary {
			_ = client.Write(data)
			continue
		}
		var ctl terminalControl
		if json.Unmarshal(data, &ctl) != nil {
			continue
		}
		switch ctl.Type {
		case "resize":
			if err := client.Resize(ctl.Cols, ctl.Rows); err != nil {
				s.log.Debug().Err(err).Msg("terminal resize refused")
			}
		case "close":
			client.End()
		case "input":
			_ = client.Write([]byte(ctl.Data))
		}
	}
}

// terminalOutput sends the scroll-back, then the screen, until the client
// or the terminal goes; it returns how to close the connection.
func (s *Server) terminalOutput(ctx context.Context, ws *websocket.Conn, client *terminal.Client) (websocket.StatusCode, string) {
	write := func(b []byte) error {
		wctx, cancel := context.WithTimeout(ctx, s.cfg.WriteTimeout)
		defer cancel()
		return ws.Write(wctx, websocket.MessageBinary, b)
	}
	if replay := client.Replay(); len(replay) > 0 {
		if write(replay) != nil {
			return websocket.StatusGoingAway, ""
		}
	}
	for {
		select {
		case b, ok := <-client.Output():
			if !ok {
				err := client.Err()
				switch {
				case errors.Is(err, terminal.ErrEnded):
					return websocket.StatusNormalClosure, "the terminal has ended"
				case errors.Is(err, terminal.ErrReplaced):
					return 4000, "the terminal was opened elsewhere"
				case errors.Is(err, terminal.ErrTooMuchInput):
					return websocket.StatusTryAgainLater, "typed faster than the terminal reads; attach again"
				default:
					return websocket.StatusTryAgainLater, "fell behind the terminal; attach again"
				}
			}
			if write(b) != nil {
				return websocket.StatusGoingAway, ""
			}
		case <-ctx.Done():
			return websocket.StatusGoingAway, ""
		case <-s.cfg.Done:
			return websocket.StatusGoingAway, "the server is shutting down"
		}
	}
}

// terminalOrigin refuses a page of an origin that may not open a
// terminal: CORS does not cover WebSockets, so a page of any origin could
// open one with the credentials it holds. A page of the server's own
// origin and one of the CORS origins may; a client that is no browser
// sends no Origin.
func (s *Server) terminalOrigin(r *http.Request) error {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return nil
	}
	if u, err := url.Parse(origin); err == nil && u.Host != "" && strings.EqualFold(u.Host, r.Host) {
		return nil
	}
	if slices.ContainsFunc(s.cfg.CORSOrigins, func(o string) bool { return strings.EqualFold(o, origin) }) {
		return nil
	}
	return &apiError{http.StatusForbidden, "a page of " + origin + " may not open a terminal here; only this server's own pages and those of --cors-origins may"}
}

// closeReason is msg cut to what a close frame holds (123 bytes), at a
// character's start.
func closeReason(msg string) string {
	const limit = 123
	if len(msg) <= limit {
		return msg
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut]
}

// originHosts are the hosts of the CORS origins, whose pages may open a
// terminal too; a page of the server's own origin always may.
// terminalOrigin checks the whole origin first; the library checks
// again.
func (s *Server) originHosts() []string {
	var hosts []string
	for _, o := range s.cfg.CORSOrigins {
		if u, err := url.Parse(o); err == nil && u.Host != "" {
			hosts = append(hosts, u.Host)
		}
	}
	return hosts
}
