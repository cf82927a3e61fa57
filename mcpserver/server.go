// Package mcpserver serves the LinkedIn tools (post, read comments, comment,
// reply) as an MCP server, built with mcp-go. The same server answers the
// Claude Code CLI in-process, through the mcp_message control requests of a
// session (HandleMessage), and other MCP clients over streamable HTTP
// (HTTPHandler).
//
// Every tool acts for exactly one person, taken from the context: the
// session that carried the message, or the authenticated HTTP request. The
// model never names the person, so a tool can never act for anyone else.
//
// It does not decide whether a publishing call may run in a chat (the
// session's permission policy does, before the call reaches it), and it
// writes its activity log only through the Appender it is given. It does
// refuse, everywhere, an identical repeat of a publish whose outcome
// LinkedIn left open, unless the person approved that repeat (Approve).
package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/server"
	"github.com/rs/zerolog"

	"github.com/majorhq/major/linkedin"
)

// ServerName is the MCP server's name: the CLI shows its tools to the model
// as mcp__linkedin__<tool>, and sessions list it among their SDK MCP
// servers.
const ServerName = "linkedin"

// The tool names, as the server lists them.
const (
	ToolPost         = "linkedin_post"
	ToolReadComments = "linkedin_read_comments"
	ToolPostComment  = "linkedin_post_comment"
	ToolReplyComment = "linkedin_reply_comment"
)

// ToolNames lists every tool of the server.
func ToolNames() []string {
	return []string{ToolPost, ToolReadComments, ToolPostComment, ToolReplyComment}
}

// PublishingTools lists the tools that publish on the person's behalf (and
// may deserve a confirmation); the rest only read.
func PublishingTools() []string {
	return []string{ToolPost, ToolPostComment, ToolReplyComment}
}

// Describe names, for the person who approves it, what a publishing call
// with these arguments would publish ("the LinkedIn post", "the LinkedIn
// comment on urn:li:activity:1", ...); "" for a tool that does not
// publish.
func Describe(tool string, args map[string]any) string {
	arg := func(name string) string {
		v, _ := args[name].(string)
		return strings.TrimSpace(v)
	}
	switch tool {
	case ToolPost:
		return "the LinkedIn post"
	case ToolPostComment:
		return "the LinkedIn comment on " + arg("post_urn")
	case ToolReplyComment:
		return "the LinkedIn reply to comment " + arg("comment_urn")
	}
	return ""
}

// QualifiedName is the name the CLI gives a tool of this server, e.g.
// mcp__linkedin__linkedin_post, as used in a session's tool lists.
func QualifiedName(tool string) string { return "mcp__" + ServerName + "__" + tool }

// QualifiedNames maps QualifiedName over tools.
func QualifiedNames(tools []string) []string {
	out := make([]string, len(tools))
	for i, t := range tools {
		out[i] = QualifiedName(t)
	}
	return out
}

// LinkedIn is the part of the LinkedIn API the tools use; *linkedin.Client
// implements it.
type LinkedIn interface {
	CreatePost(ctx context.Context, acct linkedin.Account, text string) (string, error)
	Comments(ctx context.Context, acct linkedin.Account, thread string) (linkedin.CommentPage, error)
	CreateComment(ctx context.Context, acct linkedin.Account, post, text string) (string, error)
	ReplyToComment(ctx context.Context, acct linkedin.Account, post, parent, text string) (string, error)
}

var _ LinkedIn = (*linkedin.Client)(nil)

// Config configures a Server.
type Config struct {
	// LinkedIn is the API client shared by all persons.
	LinkedIn LinkedIn
	// Accounts holds each person's token and author URN; a person missing
	// here gets "LinkedIn is not configured" from every tool.
	Accounts linkedin.Accounts
	// ActivityLog records each action in the person's log at
	// ActivityLogPath(person), outside every person's folder, and commits
	// it; nil records nothing.
	ActivityLog Appender
	// AutoPublish tells whether a person's posts, comments and replies may
	// run without the person approving each one (nil: nobody's). Over HTTP
	// (HTTPHandler) nobody is there to approve, so the publishing tools
	// run there only for these persons; reading works for everyone.
	AutoPublish func(person string) bool
	// Unconfirmed is the record of publishes whose outcome LinkedIn left
	// open (see OpenUnconfirmed); nil keeps one in memory only.
	Unconfirmed *Unconfirmed
	// LogTimeout bounds writing and committing one log entry; default 60s.
	// It runs even when the tool call was cancelled, because the post
	// already happened.
	LogTimeout time.Duration
	// Now is the clock for log timestamps; default time.Now.
	Now func() time.Time
	// Version is reported to MCP clients; default "1.0.0".
	Version string
	// Logger gets one line per tool call and every failure.
	Logger zerolog.Logger
}

// Server is the LinkedIn MCP server. It is safe for concurrent use.
type Server struct {
	li          LinkedIn
	accounts    linkedin.Accounts
	auto        func(person string) bool
	log         zerolog.Logger
	activity    *activityLog
	unconfirmed *Unconfirmed
	approvals   *approvals
	now         func() time.Time
	mcp         *server.MCPServer
	http        *server.StreamableHTTPServer
}

// New builds the server and its tools.
func New(cfg Config) *Server {
	if cfg.Version == "" {
		cfg.Version = "1.0.0"
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.LogTimeout <= 0 {
		cfg.LogTimeout = 60 * time.Second
	}
	// A private copy: the accounts are read by concurrent tool calls and
	// must not change under them.
	accts := make(linkedin.Accounts, len(cfg.Accounts))
	for p, a := range cfg.Accounts {
		accts[p] = a
	}
	auto := cfg.AutoPublish
	if auto == nil {
		auto = func(string) bool { return false }
	}
	unconfirmed := cfg.Unconfirmed
	if unconfirmed == nil {
		unconfirmed, _ = OpenUnconfirmed("", cfg.Now)
	}
	s := &Server{
		li:          cfg.LinkedIn,
		accounts:    accts,
		auto:        auto,
		log:         cfg.Logger.With().Str("component", "mcpserver").Logger(),
		unconfirmed: unconfirmed,
		approvals:   &approvals{now: cfg.Now, at: map[unconfirmedKey]time.Time{}},
		now:         cfg.Now,
	}
	s.activity = &activityLog{log: cfg.ActivityLog, now: cfg.Now, timeout: cfg.LogTimeout}
	s.mcp = server.NewMCPServer(ServerName, cfg.Version,
		server.WithToolCapabilities(false),
		// A bug in a tool must not take the session's control loop down.
		server.WithRecovery(),
	)
	s.mcp.AddTools(s.Tools()...)
	s.http = server.NewStreamableHTTPServer(s.mcp,
		// Each request stands alone: the person comes with every request,
		// and no per-session state or sweeper goroutine is needed.
		server.WithStateLess(true),
		server.WithHTTPContextFunc(personFromRequest),
		// The relay mounts this behind bearer auth, often behind a reverse
		// proxy on loopback with a public Host; the DNS-rebinding guard
		// would refuse exactly those requests, and a rebinding browser has
		// no bearer token anyway.
		server.WithDisableLocalhostProtection(true),
		server.WithStreamableHTTPLogger(slog.New(zerolog.NewSlogHandler(s.log))),
	)
	return s
}

// notificationAck answers a JSON-RPC notification; the CLI needs some
// mcp_response for every mcp_message and accepts this empty success.
var notificationAck = json.RawMessage(`{"jsonrpc":"2.0","id":0,"result":{}}`)

// HandleMessage answers one JSON-RPC message the CLI sent to this server
// through an mcp_message control request, acting for person (the session's
// person; "" means nobody, and every tool call then fails). It returns the
// JSON-RPC response to put under "mcp_response". Protocol mistakes are
// JSON-RPC errors in that response; the error return is only for a response
// that cannot be encoded.
func (s *Server) HandleMessage(ctx context.Context, person string, msg json.RawMessage) (json.RawMessage, error) {
	if person != "" {
		ctx = WithPerson(ctx, person)
	}
	resp := s.mcp.HandleMessage(ctx, msg)
	if resp == nil {
		return notificationAck, nil
	}
	out, err := json.Marshal(resp)
	if err != nil {
		return nil, fmt.Errorf("encode mcp response: %w", err)
	}
	return out, nil
}

// HTTPHandler serves the tools over MCP streamable HTTP. Mount it behind
// authentication that puts the person into the request context with
// WithPerson; a request without a person can list the tools but every call
// fails. The publishing tools run here only for the persons in
// Config.AutoPublish: an HTTP client has no way to ask the person.
func (s *Server) HTTPHandler() http.Handler { return s.http }

// Approve records that one call of a publishing tool (tool as the server
// names it) of person's, with exactly these arguments, passed the chat's
// permission check: the person approved it on a card or in the chat, or
// it runs without asking for a person who publishes so. From a chat
// session only such a call runs (once, within a few minutes), and only
// such a call may repeat a publish whose outcome was unknown; an HTTP
// call never uses it.
func (s *Server) Approve(person, tool string, args json.RawMessage) {
	if !slices.Contains(PublishingTools(), tool) {
		return
	}
	var m map[string]any
	_ = json.Unmarshal(args, &m)
	s.approvals.add(person, publishKey(tool, m))
}

// Unconfirmed reports when an identical publish of person's (same tool,
// target and text) was sent without LinkedIn confirming whether it was
// published, if that was within RepeatWindow: such a call is refused
// unless the person approves it again.
func (s *Server) Unconfirmed(person, tool string, args json.RawMessage) (time.Time, bool) {
	if !slices.Contains(PublishingTools(), tool) {
		return time.Time{}, false
	}
	var m map[string]any
	_ = json.Unmarshal(args, &m)
	return s.unconfirmed.since(person, publishKey(tool, m))
}

// Warning is what the person should know before approving a publishing
// call: that an identical one was sent at a given time and LinkedIn never
// confirmed whether it was published, and where to look; "" when none
// was, within RepeatWindow.
func (s *Server) Warning(person, tool string, args json.RawMessage) string {
	at, ok := s.Unconfirmed(person, tool, args)
	if !ok {
		return ""
	}
	var m map[string]any
	_ = json.Unmarshal(args, &m)
	what, where := publishing(tool, m)
	return fmt.Sprintf("Careful: an identical %s was sent at %s and LinkedIn never confirmed whether it was published, so it may be live already: check %s first.",
		what, at.UTC().Format("2006-01-02 15:04 MST"), where)
}

type noticeKey struct{}

// WithNotice returns ctx carrying notice, which tells the person (the
// clients of the session the call came from) what they must know about a
// tool call whatever the model makes of it: that a publish's outcome is
// unknown and where to check.
func WithNotice(ctx context.Context, notice func(text string)) context.Context {
	return context.WithValue(ctx, noticeKey{}, notice)
}

func noticeFrom(ctx context.Context) func(string) {
	n, _ := ctx.Value(noticeKey{}).(func(string))
	return n
}

func personFromRequest(ctx context.Context, r *http.Request) context.Context {
	ctx = context.WithValue(ctx, overHTTPKey{}, true)
	if p, ok := PersonFrom(r.Context()); ok {
		return WithPerson(ctx, p)
	}
	return ctx
}

// overHTTPKey marks a tool call that came through HTTPHandler rather than
// a chat session, where the person approves what is published.
type overHTTPKey struct{}

func overHTTP(ctx context.Context) bool {
	v, _ := ctx.Value(overHTTPKey{}).(bool)
	return v
}

type personKey struct{}

// WithPerson returns ctx carrying the person the tools act for.
func WithPerson(ctx context.Context, person string) context.Context {
	return context.WithValue(ctx, personKey{}, person)
}

// PersonFrom returns the person in ctx; ok is false when there is none.
func PersonFrom(ctx context.Context) (string, bool) {
	p, _ := ctx.Value(personKey{}).(string)
	return p, p != ""
}
