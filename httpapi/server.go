package httpapi

import (
	"context"
	"errors"
	"io/fs"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/majorhq/major/attachments"
	"github.com/majorhq/major/auth"
	"github.com/majorhq/major/notify"
	"github.com/majorhq/major/relay"
	"github.com/majorhq/major/supervisor"
	"github.com/majorhq/major/terminal"
	"github.com/majorhq/major/vault"
)

// Config configures the HTTP API.
type Config struct {
	// Moving, when set, reports the persons whose state is moving to
	// another server: all their requests are refused (503, Retry-After)
	// until it has.
	Moving   func(person string) bool
	Auth     *Auth
	Registry *relay.Registry
	Logger   zerolog.Logger
	// MaxBody bounds request bodies; default DefaultMaxBody.
	MaxBody int64
	// PingInterval is the keep-alive period of idle streams; default 5s.
	PingInterval time.Duration
	// SubscriberBuffer is how many events a client may lag behind before
	// it is cut off; default 4096.
	SubscriberBuffer int
	// WriteTimeout bounds writing one line to a client; default 30s.
	WriteTimeout time.Duration
	// MCP, when set, is served at /mcp behind auth, with the person put in
	// the request context by WithPerson.
	MCP        http.Handler
	WithPerson func(ctx context.Context, person string) context.Context
	// Ready reports whether the server can run turns (for /readyz), with
	// the CLI's version.
	Ready func(ctx context.Context) (version string, err error)
	// ConfigProblems counts the broken session configuration files, shown
	// by /readyz (the paths and reasons are in the log); nil: none.
	ConfigProblems func() int
	// StartRefused, when set, says why the CLI refuses to start some
	// persons' chats (the machine's managed settings forbid what their
	// configuration brings), shown by /readyz; "" when it refuses none.
	StartRefused func() string
	// Metrics, when set, is served at /metrics.
	Metrics http.Handler
	// Static, when set, serves the web client at /.
	Static http.FileSystem
	// CORSOrigins are the browser origins (scheme://host[:port]) allowed
	// to call the API from another site; none by default.
	CORSOrigins []string
	// Terminals, when set, serves the sessions' terminals.
	Terminals Terminals
	// Notify, when set, serves the push configuration, the persons'
	// devices and notification settings and the notifications' actions,
	// and hears which clients watch which session.
	Notify *notify.Service
	// Unsandboxed, when set, says that the CLIs run without the sandbox
	// (--sandbox=off) and why that matters: /readyz shows it, and the
	// terminal, whose shell nothing else would hold, is refused with it
	// (503).
	Unsandboxed string
	// Attachments, when set, takes the files messages carry and the
	// notes they attach; without it a message carries text only.
	Attachments *attachments.Store
	// Vault, when set, serves the persons' notes read-only (vault.go).
	Vault *vault.Guard
	// Done is closed when the server shuts down; streams end then.
	Done <-chan struct{}
	// FailedAuth limits failed authentications per client address;
	// default 10 at once, one more every 6 s.
	FailedAuth *auth.Limiter
	// TrustedProxies are the peers whose X-Forwarded-For (and, for the
	// pairing link, X-Forwarded-Proto and X-Forwarded-Host) is believed.
	TrustedProxies []netip.Prefix
	// Registerer, when set, gets the HTTP requests' count and duration by
	// route, method and status.
	Registerer prometheus.Registerer
}

// Server is the HTTP API in front of the sessions.
type Server struct {
	cfg     Config
	log     zerolog.Logger
	engine  *gin.Engine
	failed  *auth.Limiter
	open    openRequests
	metrics *httpMetrics
}

// NewServer builds the router.
func NewServer(cfg Config) *Server {
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.PingInterval <= 0 {
		cfg.PingInterval = 5 * time.Second
	}
	if cfg.SubscriberBuffer <= 0 {
		cfg.SubscriberBuffer = 4096
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 30 * time.Second
	}
	s := &Server{cfg: cfg, log: cfg.Logger, failed: cfg.FailedAuth, metrics: newHTTPMetrics(cfg.Registerer)}
	if s.failed == nil {
		s.failed = auth.NewLimiter(10, 6*time.Second, nil)
	}
	// A revoked token's streams end at once, not when they next write.
	cfg.Auth.OnChange(s.closeRevoked)
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.HandleMethodNotAllowed = true
	r.Use(s.recoverer, s.accessLog, s.securityHeaders)
	if len(cfg.CORSOrigins) > 0 {
		r.Use(cors(cfg.CORSOrigins))
	}
	r.NoRoute(func(c *gin.Context) {
		s.fail(c, &apiError{http.StatusNotFound, "no such endpoint: " + c.Request.URL.Path})
	})
	r.NoMethod(func(c *gin.Context) {
		s.fail(c, &apiError{http.StatusMethodNotAllowed, c.Request.Method + " is not allowed on " + c.Request.URL.Path})
	})

	r.GET("/healthz", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"status": "ok"}) })
	r.GET("/readyz", s.readyz)
	if cfg.Metrics != nil {
		r.GET("/metrics", gin.WrapH(cfg.Metrics))
	}

	api := r.Group("/api/claude", s.authenticate)
	api.POST("/chat-stream", s.chatStream)
	api.POST("/chat", s.chat)
	api.POST("/clear", s.clear)
	api.GET("/history", s.history)
	api.GET("/sessions", s.listSessions)
	api.POST("/sessions", s.createSession)
	api.GET("/sessions/:id/events", s.events)
	api.GET("/sessions/:id/messages", s.messages)
	api.POST("/sessions/:id/messages", s.postMessage)
	api.GET("/sessions/:id/queue", s.listQueue)
	api.DELETE("/sessions/:id/queue/:queue_id", s.cancelQueued)
	api.POST("/sessions/:id/interrupt", s.interrupt)
	api.POST("/sessions/:id/answer", s.answer)
	api.POST("/sessions/:id/permission", s.permission)
	api.GET("/sessions/:id", s.getSession)
	api.DELETE("/sessions/:id", s.deleteSession)
	api.POST("/sessions/:id/title", sessionSetting(s, func(_ context.Context, chat *relay.Session, r *titleRequest) error {
		return chat.SetTitle(r.Title)
	}))
	api.POST("/sessions/:id/pin", sessionSetting(s, func(_ context.Context, chat *relay.Session, r *pinRequest) error {
		chat.SetPinned(*r.Pinned)
		return nil
	}))
	api.POST("/sessions/:id/model", sessionSetting(s, func(ctx context.Context, chat *relay.Session, r *modelRequest) error {
		return chat.SetModel(ctx, r.Model)
	}))
	api.POST("/sessions/:id/permission-mode", sessionSetting(s, func(ctx context.Context, chat *relay.Session, r *permissionModeRequest) error {
		return chat.SetPermissionMode(ctx, r.Mode)
	}))
	api.POST("/sessions/:id/thinking", sessionSetting(s, func(ctx context.Context, chat *relay.Session, r *thinkingRequest) error {
		return chat.SetThinking(ctx, r.MaxThinkingTokens, r.Effort)
	}))
	api.POST("/sessions/:id/fork", s.fork)
	api.POST("/sessions/:id/rewind", s.rewind)
	api.GET("/usage", s.usage)
	api.GET("/sessions/:id/terminal", s.terminal)
	api.POST("/sessions/:id/attachments", s.uploadAttachments)
	api.GET("/sessions/:id/changes", s.changes)
	api.GET("/sessions/:id/changes/:turn", s.turnDiff)
	api.GET("/vault/tree", s.vaultTree)
	api.GET("/vault/file", s.vaultFile)
	api.GET("/tokens", s.listTokens)
	api.DELETE("/tokens/:name", s.revokeToken)
	api.POST("/pairings", s.createPairing)
	// Redeeming a pairing code is how a device gets its token: the code
	// is its credential, limited like a token.
	r.POST("/api/claude/pair", s.redeemPairing)
	if cfg.Notify != nil {
		api.GET("/push/config", s.pushConfig)
		api.GET("/devices", s.listDevices)
		api.POST("/devices", s.addDevice)
		api.DELETE("/devices/:id", s.removeDevice)
		api.GET("/notifications", s.getNotifications)
		api.PUT("/notifications", s.putNotifications)
		api.POST("/notifications/test", s.testNotification)
		api.POST("/presence", s.presence)
		// The token is the action's only credential.
		r.POST(actionsPath+":token", s.action)
	}

	if cfg.MCP != nil {
		mcp := func(c *gin.Context) {
			ctx := c.Request.Context()
			if cfg.WithPerson != nil {
				ctx = cfg.WithPerson(ctx, personOf(c))
			}
			cfg.MCP.ServeHTTP(c.Writer, c.Request.WithContext(ctx))
		}
		r.Any("/mcp", s.authenticate, mcp)
		r.Any("/mcp/*rest", s.authenticate, mcp)
	}
	if cfg.Static != nil {
		r.GET("/app/*filepath", s.static)
		r.HEAD("/app/*filepath", s.static)
		r.GET("/", func(c *gin.Context) { c.Redirect(http.StatusFound, "/app/") })
	}
	s.engine = r
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.engine.ServeHTTP(w, r) }

// fail writes err as {"error": "..."} with its status (statusOf).
func (s *Server) fail(c *gin.Context, err error) {
	status, msg, retryAfter := s.statusOf(err, c.Request.URL.Path)
	if retryAfter != "" {
		c.Header("Retry-After", retryAfter)
	}
	c.AbortWithStatusJSON(status, gin.H{"error": s.clientText(c, msg)})
}

// statusOf is the HTTP status of err, the message a client sees and, for
// a refusal worth trying again soon, the seconds to wait (Retry-After).
// This is the one place errors become HTTP statuses; path names the
// request in the log of an unexpected error.
func (s *Server) statusOf(err error, path string) (status int, msg, retryAfter string) {
	status, msg = http.StatusInternalServerError, "internal error"
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		status, msg = ae.status, ae.msg
	case errors.Is(err, auth.ErrNotFound):
		status, msg = http.StatusNotFound, err.Error()
	case errors.Is(err, auth.ErrShared):
		status, msg = http.StatusForbidden, err.Error()
	case errors.Is(err, auth.ErrBadCode):
		status, msg = http.StatusUnauthorized, err.Error()
	case errors.Is(err, auth.ErrBadName):
		status, msg = http.StatusBadRequest, err.Error()
	case errors.Is(err, relay.ErrNotFound):
		status, msg = http.StatusNotFound, "session not found"
	case errors.Is(err, relay.ErrTooManySessions):
		status, msg = http.StatusTooManyRequests, err.Error()
	case errors.Is(err, relay.ErrTerminalOpen):
		status, msg = http.StatusConflict, err.Error()
	case errors.Is(err, terminal.ErrStopped):
		status, msg = http.StatusGone, err.Error()
	case errors.Is(err, terminal.ErrEnded):
		status, msg = http.StatusServiceUnavailable, "the server is shutting down"
	case errors.Is(err, vault.ErrSyncRunning):
		status, msg = http.StatusServiceUnavailable, "the notes are being synced with git; try again in a moment"
		retryAfter = "5"
	case errors.Is(err, supervisor.ErrBusy):
		status, msg = http.StatusConflict, "the session is already running a turn; wait for it to finish or interrupt it"
	case errors.Is(err, relay.ErrQueueFull):
		status, msg = http.StatusTooManyRequests, err.Error()+"; wait for the replies or cancel a waiting message"
		retryAfter = "10"
	case errors.Is(err, relay.ErrNotQueued):
		status, msg = http.StatusNotFound, "no such waiting message; it may have started already"
	case errors.Is(err, relay.ErrCancelled):
		status, msg = http.StatusConflict, "the message was cancelled before it ran"
	case errors.Is(err, relay.ErrNotSteered):
		status, msg = http.StatusConflict, err.Error()
	case errors.Is(err, supervisor.ErrNotRunning):
		status, msg = http.StatusConflict, "the session is not running a turn"
	case errors.Is(err, supervisor.ErrClosed):
		status, msg = http.StatusGone, "the session is closed"
	case errors.Is(err, relay.ErrUnknownRequest):
		status, msg = http.StatusNotFound, "no such pending request"
	case errors.Is(err, relay.ErrAlreadyAnswered):
		status, msg = http.StatusConflict, "that request was already answered"
	case errors.Is(err, relay.ErrGone):
		status, msg = http.StatusGone, "events before that seq are no longer kept; attach with after=0"
	case errors.Is(err, relay.ErrOverBudget):
		// 402: the message is refused until the budget renews (a new day,
		// a new chat), not until some time passes, as 429 would say.
		status, msg = http.StatusPaymentRequired, err.Error()
	case errors.Is(err, relay.ErrBadSetting):
		status, msg = http.StatusBadRequest, strings.TrimPrefix(err.Error(), relay.ErrBadSetting.Error()+": ")
	case errors.Is(err, relay.ErrRefused):
		status, msg = http.StatusUnprocessableEntity, err.Error()
	case errors.Is(err, relay.ErrNoCheckpoint):
		status, msg = http.StatusConflict, err.Error()
	case errors.Is(err, vault.ErrOutsideVault), errors.Is(err, vault.ErrOutsideFolder), errors.Is(err, vault.ErrProtectedName):
		status, msg = http.StatusForbidden, err.Error()
	case errors.Is(err, fs.ErrNotExist):
		status, msg = http.StatusNotFound, err.Error()
	case errors.Is(err, attachments.ErrTooLarge), errors.Is(err, attachments.ErrTooMany):
		status, msg = http.StatusRequestEntityTooLarge, err.Error()
	case errors.Is(err, attachments.ErrBadName), errors.Is(err, attachments.ErrMismatch), errors.Is(err, attachments.ErrCutOff),
		errors.Is(err, attachments.ErrUnknown), errors.Is(err, attachments.ErrBadNote), errors.Is(err, attachments.ErrBadHistory),
		errors.Is(err, vault.ErrNotFile), errors.Is(err, vault.ErrNotFolder):
		status, msg = http.StatusBadRequest, err.Error()
	case errors.Is(err, relay.ErrNoChanges):
		status, msg = http.StatusNotFound, err.Error()
	case errors.Is(err, notify.ErrInvalidToken):
		status, msg = http.StatusForbidden, err.Error()
	case errors.Is(err, notify.ErrTokenGone):
		status, msg = http.StatusGone, err.Error()
	case errors.Is(err, notify.ErrBadDevice), errors.Is(err, notify.ErrBadSettings):
		status, msg = http.StatusBadRequest, err.Error()
	case errors.Is(err, notify.ErrNoDevice):
		status, msg = http.StatusNotFound, err.Error()
	case errors.Is(err, relay.ErrMoving):
		// The person's state is on its way to another server; the proxy
		// routes them there once it has arrived.
		status, msg = http.StatusServiceUnavailable, err.Error()
		retryAfter = "30"
	case errors.Is(err, relay.ErrUnavailable), errors.Is(err, supervisor.ErrNoSlot), errors.Is(err, supervisor.ErrPersonBusy):
		status, msg = http.StatusServiceUnavailable, err.Error()
		retryAfter = "5"
	default:
		s.log.Error().Err(err).Str("path", loggedPath(path)).Msg("request failed")
	}
	return status, msg, retryAfter
}

// clientText is an error's text as the request's person may read it:
// without the server's paths (the error itself is logged where it is
// handled).
func (s *Server) clientText(c *gin.Context, text string) string {
	if s.cfg.Registry == nil {
		return text
	}
	return s.cfg.Registry.ClientText(personOf(c), text)
}

func (s *Server) recoverer(c *gin.Context) {
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.log.Error().Interface("panic", v).Str("path", loggedPath(c.Request.URL.Path)).Msg("handler panicked")
			if !c.Writer.Written() {
				s.fail(c, errors.New("panic"))
			}
		}
	}()
	c.Next()
}

func (s *Server) readyz(c *gin.Context) {
	if s.cfg.Ready == nil {
		c.JSON(http.StatusOK, gin.H{"status": "ready"})
		return
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), 10*time.Second)
	defer cancel()
	version, err := s.cfg.Ready(ctx)
	body, status := gin.H{"status": "ready", "claude_version": version}, http.StatusOK
	if err != nil {
		body, status = gin.H{"status": "not ready", "error": err.Error()}, http.StatusServiceUnavailable
	}
	// A broken configuration file does not stop turns (the last good
	// configuration is in force), so it only shows.
	if s.cfg.ConfigProblems != nil {
		if n := s.cfg.ConfigProblems(); n > 0 {
			body["config_problems"] = n
		}
	}
	// Likewise a policy that refuses some persons' chats: the others run.
	if s.cfg.StartRefused != nil {
		if why := s.cfg.StartRefused(); why != "" {
			body["start_refused"] = why
		}
	}
	if s.cfg.Unsandboxed != "" {
		body["sandbox"], body["warning"] = "off", s.cfg.Unsandboxed
	}
	c.JSON(status, body)
}

// validated is a request body that checks itself after decoding.
type validated interface {
	formDecoder
	validate() error
}

// bind decodes and validates the body into req, answering the client on
// failure.
func (s *Server) bind(c *gin.Context, req validated) bool {
	if err := decodeBody(c.Request, s.cfg.MaxBody, req); err != nil {
		s.fail(c, err)
		return false
	}
	if err := req.validate(); err != nil {
		s.fail(c, err)
		return false
	}
	return true
}

// chatTicket finds or creates the session of a chat request and hands it
// the message. The same text as a message already on its way in that
// session (or, without a known session id, one that opened a session of
// the person's) is a client sending again after its connection dropped:
// it follows that message instead of reaching the model twice. With
// attach, a request that says it can answer questions is counted as an
// interactive client before its message goes in (the CLI may ask at
// once), until detach is called; and any request counts as watching its
// chat until then (it waits for the turn's end).
func (s *Server) chatTicket(c *gin.Context, attach bool) (chat *relay.Session, t *relay.Ticket, req chatRequest, detach func(), ok bool) {
	detach = func() {}
	msg, ok := s.bindMessage(c, &req)
	if !ok {
		return nil, nil, req, detach, false
	}
	person := personOf(c)
	chat, err := s.cfg.Registry.Get(req.SessionID, person)
	opened := err != nil
	if opened {
		if prev, t := s.cfg.Registry.ResendTarget(person, req.Message, msg.attached.Content.Digest); t != nil {
			msg.settle(t)
			if attach && req.Interactive {
				detach = prev.AttachInteractive()
			}
			return prev, t, req, both(detach, s.watch(person, prev.ID, "", true)), true
		}
		if chat, err = s.cfg.Registry.GetOrCreate("", person); err != nil {
			msg.settle(nil)
			s.fail(c, err)
			return nil, nil, req, detach, false
		}
	}
	if attach && req.Interactive {
		detach = chat.AttachInteractive()
	}
	// The client waits for the turn's end: it watches the chat.
	detach = both(detach, s.watch(person, chat.ID, "", true))
	o := relay.SubmitOptions{Stream: true, Opened: opened, Attached: msg.attached}
	if req.Steer && !opened && !req.carriesFiles() {
		// Into the running turn, whose rest is this message's answer.
		t, _, err = s.cfg.Registry.Steer(chat, req.Message, o)
	} else {
		t, err = s.cfg.Registry.Submit(chat, req.Message, o)
	}
	msg.settle(t)
	if err != nil {
		detach()
		s.fail(c, err)
		return nil, nil, req, func() {}, false
	}
	return chat, t, req, detach, true
}

// both is a func that calls a and b.
func both(a, b func()) func() {
	return func() {
		a()
		b()
	}
}

// Statuses a waiting chat-stream shows.
const (
	queuedStatus   = "Waiting for the reply to your previous message ..."
	slotWaitStatus = "Waiting for a free assistant process ..."
)

// awaitTurn waits until t's turn starts, calling idle every ping interval
// and status when t waits in the queue or for a free process. The error
// is why the turn never started, or why the wait ended first.
func (s *Server) awaitTurn(ctx context.Context, t *relay.Ticket, status func(string) error, idle func() error) error {
	if status == nil {
		status = func(string) error { return nil }
	}
	if idle == nil {
		idle = func() error { return nil }
	}
	if t.Queued() && !isClosed(t.Started()) {
		if err := status(queuedStatus); err != nil {
			return err
		}
	}
	ping := time.NewTimer(s.cfg.PingInterval)
	defer ping.Stop()
	slot := t.SlotWait()
	for {
		if isClosed(t.Started()) {
			return t.Err()
		}
		select {
		case <-t.Started():
			return t.Err()
		case <-slot:
			slot = nil
			if err := status(slotWaitStatus); err != nil {
				return err
			}
			ping.Reset(s.cfg.PingInterval)
		case <-ping.C:
			if err := idle(); err != nil {
				return err
			}
			ping.Reset(s.cfg.PingInterval)
		case <-ctx.Done():
			return ctx.Err()
		case <-s.cfg.Done:
			return errShuttingDown
		}
	}
}

// followTurn calls fn for each event of t's turn (started) that the
// compat clients know, from its first up to and including its terminal
// event, replaying what was already published. It returns false if the
// stream ended first (client gone, cut off, shutdown). The CLI's own
// events (most of a turn's) are left out by the stream itself: they
// neither wake this goroutine nor fill its buffer.
func (s *Server) followTurn(ctx context.Context, chat *relay.Session, t *relay.Ticket, fn func(*relay.Event) error, idle func() error) (bool, error) {
	turn := t.Turn()
	compat := func(ev *relay.Event) bool { return ev.Turn == turn && (ev.Compat != nil || ev.Terminal) }
	sub, err := chat.Stream().Subscribe(t.StartSeq(), compat, s.cfg.SubscriberBuffer)
	if err != nil {
		return false, err
	}
	defer sub.Close()
	// handle reports whether ev ended the turn.
	handle := func(ev *relay.Event) (bool, error) {
		if err := fn(ev); err != nil {
			return false, err
		}
		return ev.Terminal, nil
	}
	for _, ev := range sub.Replay {
		if end, err := handle(ev); end || err != nil {
			return end, err
		}
	}
	ping := time.NewTimer(s.cfg.PingInterval)
	defer ping.Stop()
	for {
		select {
		case ev, ok := <-sub.C:
			if !ok {
				return false, sub.Err()
			}
			if end, err := handle(ev); end || err != nil {
				return end, err
			}
			ping.Reset(s.cfg.PingInterval)
		case <-ping.C:
			if idle != nil {
				if err := idle(); err != nil {
					return false, err
				}
			}
			ping.Reset(s.cfg.PingInterval)
		case <-ctx.Done():
			return false, ctx.Err()
		case <-s.cfg.Done:
			// Shutdown ends turns first: what is buffered still goes out.
			for {
				select {
				case ev, ok := <-sub.C:
					if !ok {
						return false, errShuttingDown
					}
					if end, err := handle(ev); end || err != nil {
						return end, err
					}
				default:
					return false, errShuttingDown
				}
			}
		}
	}
}

var errShuttingDown = errors.New("server is shutting down")

func errText(err error) string {
	if err == nil {
		return "stream ended"
	}
	return err.Error()
}

func (s *Server) clear(c *gin.Context) {
	var req clearRequest
	if err := decodeBody(c.Request, s.cfg.MaxBody, &req); err != nil {
		s.fail(c, err)
		return
	}
	if req.SessionID == "" {
		s.fail(c, badRequest("session_id is required"))
		return
	}
	cleared := s.cfg.Registry.Clear(req.SessionID, personOf(c))
	if cleared && s.cfg.Terminals != nil {
		// A cleared conversation is not continued in a terminal either.
		s.cfg.Terminals.End(req.SessionID)
	}
	c.JSON(http.StatusOK, gin.H{"cleared": cleared})
}

func (s *Server) history(c *gin.Context) {
	id := c.Query("session_id")
	if id == "" {
		s.fail(c, badRequest("session_id is required"))
		return
	}
	chat, err := s.cfg.Registry.Get(id, personOf(c))
	if err != nil {
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"session_id": chat.ID, "messages": chat.History()})
}

// listSessions lists the person's chats, pinned ones first; with ?q=
// only those whose title or messages hold every word of q, the most
// recently active first.
func (s *Server) listSessions(c *gin.Context) {
	if q, ok := c.GetQuery("q"); ok {
		if len(q) > relay.MaxQuery {
			s.fail(c, badRequest("q is longer than %d bytes", relay.MaxQuery))
			return
		}
		c.JSON(http.StatusOK, gin.H{"sessions": s.cfg.Registry.Search(personOf(c), q)})
		return
	}
	c.JSON(http.StatusOK, gin.H{"sessions": s.cfg.Registry.List(personOf(c))})
}

// deleteSession ends the person's chat and removes it with its history,
// as /clear does (404 for a chat that is not theirs).
func (s *Server) deleteSession(c *gin.Context) {
	id := c.Param("id")
	if !s.cfg.Registry.Clear(id, personOf(c)) {
		s.fail(c, relay.ErrNotFound)
		return
	}
	if s.cfg.Terminals != nil {
		s.cfg.Terminals.End(id)
	}
	c.JSON(http.StatusOK, gin.H{"deleted": true})
}

func (s *Server) createSession(c *gin.Context) {
	var req createRequest
	if c.Request.ContentLength != 0 {
		if err := decodeBody(c.Request, s.cfg.MaxBody, &req); err != nil {
			var ae *apiError
			if !errors.As(err, &ae) || ae.msg != "request body is empty" {
				s.fail(c, err)
				return
			}
		}
		if err := req.validate(); err != nil {
			s.fail(c, err)
			return
		}
	}
	chat, err := s.cfg.Registry.CreateWithHistory(personOf(c), req.History)
	if err != nil {
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusCreated, chat.Info())
}

// session finds the person's session named in the path.
func (s *Server) session(c *gin.Context) (*relay.Session, bool) {
	chat, err := s.cfg.Registry.Get(c.Param("id"), personOf(c))
	if err != nil {
		s.fail(c, err)
		return nil, false
	}
	return chat, true
}

// events attaches to a session: replay after ?after=, then live events.
func (s *Server) events(c *gin.Context) {
	chat, ok := s.session(c)
	if !ok {
		return
	}
	after := int64(0)
	if v := c.Query("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			s.fail(c, badRequest("after must be a non-negative integer (the last seq you saw)"))
			return
		}
		after = n
	}
	filter, err := typeFilter(c.Query("types"))
	if err != nil {
		s.fail(c, err)
		return
	}
	page, visible, err := eventsPage(c)
	if err != nil {
		s.fail(c, err)
		return
	}
	// Questions and permissions still open are shown again even if the
	// client saw them before it dropped.
	pending := chat.PendingEvents()
	sub, err := chat.Stream().Subscribe(after, filter, s.cfg.SubscriberBuffer)
	if err != nil {
		s.fail(c, err)
		return
	}
	defer sub.Close()
	defer chat.AttachInteractive()()
	defer s.watch(personOf(c), chat.ID, page, visible)()

	w := newLineWriter(c, s.cfg.WriteTimeout)
	for _, ev := range pending {
		if ev != nil && ev.Seq <= after && filter(ev) {
			if w.line(ev.Line) != nil {
				return
			}
		}
	}
	for _, ev := range sub.Replay {
		if w.line(ev.Line) != nil {
			return
		}
	}
	w.flush()
	ping := time.NewTimer(s.cfg.PingInterval)
	defer ping.Stop()
	ctx := c.Request.Context()
	for {
		select {
		case ev, ok := <-sub.C:
			if !ok {
				return // cut off or closed: the client re-attaches with its last seq
			}
			if w.line(ev.Line) != nil {
				return
			}
			ping.Reset(s.cfg.PingInterval)
		case <-ping.C:
			if w.line(pingLine) != nil {
				return
			}
			ping.Reset(s.cfg.PingInterval)
		case <-ctx.Done():
			return
		case <-s.cfg.Done:
			for { // send what is buffered, then end
				select {
				case ev, ok := <-sub.C:
					if !ok || w.line(ev.Line) != nil {
						return
					}
				default:
					return
				}
			}
		}
	}
}

// typeFilter parses ?types=a,b into a filter; empty means every type.
func typeFilter(spec string) (func(*relay.Event) bool, error) {
	if strings.TrimSpace(spec) == "" {
		return func(*relay.Event) bool { return true }, nil
	}
	want := map[string]bool{}
	for _, t := range strings.Split(spec, ",") {
		t = strings.TrimSpace(t)
		if t == "" {
			continue
		}
		if !vault.ValidPerson(strings.ReplaceAll(t, "_", "-")) {
			return nil, badRequest("types must be a comma-separated list of event types")
		}
		want[t] = true
	}
	if len(want) == 0 {
		return nil, badRequest("types names no event type; leave it out for every type")
	}
	return func(ev *relay.Event) bool { return want[ev.Type] }, nil
}

// postMessage starts a turn without holding a stream open, or queues it
// behind the running one, or with steer gives it to the running one.
func (s *Server) postMessage(c *gin.Context) {
	chat, ok := s.session(c)
	if !ok {
		return
	}
	var req chatRequest
	msg, ok := s.bindMessage(c, &req)
	if !ok {
		return
	}
	if req.Steer && !req.carriesFiles() {
		msg.settle(nil)
		s.steerMessage(c, chat, req.Message)
		return
	}
	// Over budget now: refused at once, never queued.
	if err := s.cfg.Registry.Admit(chat, req.Message); err != nil {
		msg.settle(nil)
		s.fail(c, err)
		return
	}
	seq := chat.Stream().Seq()
	t, err := s.cfg.Registry.Submit(chat, req.Message, relay.SubmitOptions{Attached: msg.attached})
	msg.settle(t)
	if err != nil {
		s.fail(c, err)
		return
	}
	if !t.Queued() && !s.started(c, t) {
		return
	}
	c.JSON(http.StatusAccepted, gin.H{"session_id": chat.ID, "after": seq, "queue_id": t.ID, "queued": t.Queued()})
}

// started waits until message t, which starts now (it is not queued), has
// started, so that a full server answers 503. False when it could not
// start (its error is answered) or the client left.
func (s *Server) started(c *gin.Context, t *relay.Ticket) bool {
	select {
	case <-t.Started():
	case <-c.Request.Context().Done():
		return false
	}
	if err := t.Err(); err != nil {
		s.fail(c, err)
		return false
	}
	return true
}

// listQueue lists the session's waiting messages.
func (s *Server) listQueue(c *gin.Context) {
	chat, ok := s.session(c)
	if !ok {
		return
	}
	c.JSON(http.StatusOK, gin.H{"session_id": chat.ID, "queue": chat.Queue()})
}

// cancelQueued cancels a waiting message.
func (s *Server) cancelQueued(c *gin.Context) {
	chat, ok := s.session(c)
	if !ok {
		return
	}
	if err := chat.CancelQueued(c.Param("queue_id")); err != nil {
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"cancelled": true})
}

func (s *Server) interrupt(c *gin.Context) {
	chat, ok := s.session(c)
	if !ok {
		return
	}
	if err := decodeOptional(c, s.cfg.MaxBody); err != nil {
		s.fail(c, err)
		return
	}
	if err := chat.Interrupt(c.Request.Context()); err != nil {
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"interrupted": true})
}

// decodeOptional accepts an empty body or any well-formed one.
func decodeOptional(c *gin.Context, limit int64) error {
	if c.Request.ContentLength == 0 {
		return nil
	}
	var req emptyRequest
	err := decodeBody(c.Request, limit, &req)
	var ae *apiError
	if errors.As(err, &ae) && ae.msg == "request body is empty" {
		return nil
	}
	return err
}

func (s *Server) answer(c *gin.Context) {
	chat, ok := s.session(c)
	if !ok {
		return
	}
	var req answerRequest
	if !s.bind(c, &req) {
		return
	}
	if err := chat.Answer("question", req.RequestID, relay.Answer{Answers: req.Answers}); err != nil {
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"answered": true})
}

func (s *Server) permission(c *gin.Context) {
	chat, ok := s.session(c)
	if !ok {
		return
	}
	var req permissionRequest
	if !s.bind(c, &req) {
		return
	}
	ans := relay.Answer{Allow: req.Behavior == "allow", Message: req.Message, Remember: req.Remember}
	if err := chat.Answer("permission", req.RequestID, ans); err != nil {
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"answered": true})
}

// messages serves the rich history of a session.
func (s *Server) messages(c *gin.Context) {
	chat, ok := s.session(c)
	if !ok {
		return
	}
	c.JSON(http.StatusOK, gin.H{"session_id": chat.ID, "messages": chat.Messages()})
}

// sessionSetting serves a POST that changes a setting of a session (its
// title, pin, model, permission mode, thinking): the body decoded into a
// T, applied by set, and the session as the list describes it in answer.
func sessionSetting[T any, P interface {
	*T
	validated
}](s *Server, set func(ctx context.Context, chat *relay.Session, req P) error) gin.HandlerFunc {
	return func(c *gin.Context) {
		chat, ok := s.session(c)
		if !ok {
			return
		}
		req := P(new(T))
		if !s.bind(c, req) {
			return
		}
		if err := set(c.Request.Context(), chat, req); err != nil {
			s.fail(c, err)
			return
		}
		c.JSON(http.StatusOK, chat.Info())
	}
}

// getSession describes one session, as the sessions list does.
func (s *Server) getSession(c *gin.Context) {
	chat, ok := s.session(c)
	if !ok {
		return
	}
	c.JSON(http.StatusOK, chat.Info())
}

// fork makes a new session that continues the conversation.
func (s *Server) fork(c *gin.Context) {
	if err := decodeOptional(c, s.cfg.MaxBody); err != nil {
		s.fail(c, err)
		return
	}
	chat, err := s.cfg.Registry.Fork(c.Param("id"), personOf(c))
	if err != nil {
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusCreated, chat.Info())
}

// rewind restores the files the agent changed since a message, and the
// conversation to before it when asked.
func (s *Server) rewind(c *gin.Context) {
	chat, ok := s.session(c)
	if !ok {
		return
	}
	var req rewindRequest
	if !s.bind(c, &req) {
		return
	}
	res, err := s.cfg.Registry.Rewind(c.Request.Context(), chat, relay.RewindRequest{MessageID: req.MessageID, DryRun: req.DryRun,
		Files: req.Files == nil || *req.Files, Conversation: req.Conversation})
	if err != nil {
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, res)
}

// usage sums the person's turns per day.
func (s *Server) usage(c *gin.Context) {
	days := 7
	if v := c.Query("days"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 366 {
			s.fail(c, badRequest("days must be a whole number from 1 to 366"))
			return
		}
		days = n
	}
	c.JSON(http.StatusOK, s.cfg.Registry.Usage(personOf(c), days))
}

// steerMessage gives a posted message to the session's running turn (202
// {session_id, after, queue_id, queued: false, steered: true}; the
// steered event says when it went in, a refused one of kind turn_ended
// that it never did); with no turn running it is posted as any message,
// with steered false.
func (s *Server) steerMessage(c *gin.Context, chat *relay.Session, message string) {
	// Over budget now: refused at once.
	if err := s.cfg.Registry.Admit(chat, message); err != nil {
		s.fail(c, err)
		return
	}
	seq := chat.Stream().Seq()
	t, steered, err := s.cfg.Registry.Steer(chat, message, relay.SubmitOptions{})
	if err != nil {
		s.fail(c, err)
		return
	}
	if !steered && !t.Queued() && !s.started(c, t) {
		return
	}
	c.JSON(http.StatusAccepted, gin.H{"session_id": chat.ID, "after": seq, "queue_id": t.ID, "queued": t.Queued(), "steered": steered})
}
