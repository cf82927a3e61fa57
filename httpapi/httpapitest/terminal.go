package httpapitest

import (
	"bytes"
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// Terminal is a test's WebSocket to a session's terminal, opened as a
// browser opens it; it keeps every screen byte received.
type Terminal struct {
	ws     *websocket.Conn
	mu     sync.Mutex
	screen bytes.Buffer
	closed chan struct{}
	status websocket.StatusCode
}

// DialTerminal opens session id's terminal on the server at baseURL with
// the subprotocols a browser offers (token and person left out when
// empty). A refused upgrade gives nil and the HTTP status; an open one
// 101. The connection is closed when the test ends.
func DialTerminal(tb testing.TB, baseURL, id, token, person string) (*Terminal, int) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	protos := []string{"major.v1"}
	if token != "" {
		protos = append(protos, "bearer."+base64.RawURLEncoding.EncodeToString([]byte(token)))
	}
	if person != "" {
		protos = append(protos, "person."+person)
	}
	url := "ws" + strings.TrimPrefix(baseURL, "http") + "/api/claude/sessions/" + id + "/terminal"
	ws, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{Subprotocols: protos})
	if err != nil {
		if resp == nil {
			tb.Fatalf("dial the terminal: %v", err)
		}
		if resp.StatusCode != http.StatusSwitchingProtocols {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
			tb.Logf("the terminal was refused: %s %s", resp.Status, b)
		}
		return nil, resp.StatusCode
	}
	if ws.Subprotocol() != "major.v1" {
		tb.Fatalf("the terminal's subprotocol %q", ws.Subprotocol())
	}
	ws.SetReadLimit(4 << 20)
	c := &Terminal{ws: ws, closed: make(chan struct{})}
	go func() {
		defer close(c.closed)
		for {
			_, b, err := ws.Read(context.Background())
			if err != nil {
				c.status = websocket.CloseStatus(err)
				return
			}
			c.mu.Lock()
			c.screen.Write(b)
			c.mu.Unlock()
		}
	}()
	tb.Cleanup(func() {
		c.Close()
		if tb.Failed() {
			sc := c.Screen()
			tb.Logf("the terminal's screen, last bytes: %q", sc[max(0, len(sc)-4000):])
		}
	})
	return c, http.StatusSwitchingProtocols
}

// Screen is every screen byte received so far.
func (c *Terminal) Screen() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.screen.String()
}

// Text is the screen so far as words: every control sequence (a cursor
// move, a colour, a title) and every run of white space counts as one
// space, so text reads the same however the CLI chose to draw it (a
// redraw may move the cursor over a blank instead of writing a space).
func (c *Terminal) Text() string { return ScreenText(c.Screen()) }

// ScreenText turns terminal output into words separated by single spaces.
func ScreenText(screen string) string {
	var b strings.Builder
	space := func() {
		if s := b.String(); s != "" && !strings.HasSuffix(s, " ") {
			b.WriteByte(' ')
		}
	}
	for i := 0; i < len(screen); {
		switch ch := screen[i]; {
		case ch == 0x1b && i+1 < len(screen) && screen[i+1] == '[':
			// CSI: parameters and intermediates up to a final byte.
			j := i + 2
			for j < len(screen) && (screen[j] < 0x40 || screen[j] > 0x7e) {
				j++
			}
			i = j + 1
			space()
		case ch == 0x1b && i+1 < len(screen) && (screen[i+1] == ']' || screen[i+1] == 'P' || screen[i+1] == '_'):
			// OSC, DCS, APC: up to BEL or ST.
			j := i + 2
			for j < len(screen) && screen[j] != 0x07 && !(screen[j] == 0x1b && j+1 < len(screen) && screen[j+1] == '\\') {
				j++
			}
			if j < len(screen) && screen[j] == 0x1b {
				j++
			}
			i = j + 1
		case ch == 0x1b:
			i += 2
		case ch < 0x20 || ch == ' ':
			i++
			space()
		case strings.HasPrefix(screen[i:], "\u00a0"):
			i += len("\u00a0")
			space()
		default:
			b.WriteByte(ch)
			i++
		}
	}
	return strings.TrimSpace(b.String())
}

// Send writes one message: keystrokes (binary) or a control (text).
func (c *Terminal) Send(tb testing.TB, typ websocket.MessageType, b []byte) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.ws.Write(ctx, typ, b); err != nil {
		tb.Fatalf("write to the terminal: %v", err)
	}
}

// Type sends keys as typing does and waits (up to 30 s) until the CLI drew
// something after them, so that the next keys reach it in a read of their
// own: keys that arrive together with others are taken as a paste (Enter
// pasted after text does not submit it).
func (c *Terminal) Type(tb testing.TB, keys string) {
	tb.Helper()
	before := len(c.Screen())
	c.Send(tb, websocket.MessageBinary, []byte(keys))
	for deadline := time.Now().Add(30 * time.Second); len(c.Screen()) == before && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
}

// Close closes the connection normally and waits until it is closed.
func (c *Terminal) Close() {
	_ = c.ws.Close(websocket.StatusNormalClosure, "")
	<-c.closed
}

// Drop goes away without a word, as a client whose network is gone does:
// the connection is closed with no close handshake.
func (c *Terminal) Drop() {
	_ = c.ws.CloseNow()
	<-c.closed
}

// Closed is closed once the server closed the connection (or Close did).
func (c *Terminal) Closed() <-chan struct{} { return c.closed }

// Status is the close status the connection ended with; valid once
// Closed is.
func (c *Terminal) Status() websocket.StatusCode { return c.status }
