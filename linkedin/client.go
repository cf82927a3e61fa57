// Package linkedin is a small client for LinkedIn's versioned REST API: text
// posts through the Posts API and comments and replies through socialActions.
//
// It targets LinkedIn-Version 202603 (March 2026, the latest version listed
// in LinkedIn's Marketing API versioning docs when this was written; it is
// supported until March 2027). Override Config.Version to move to a newer
// one; the request and response shapes used here have been stable across
// the versioned releases.
//
// The client holds no credentials: every call takes the Account of the
// person it acts for, so one Client serves every person and can never mix
// up whose token it sends.
package linkedin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
)

// Defaults for Config.
const (
	DefaultBaseURL = "https://api.linkedin.com"
	DefaultVersion = "202603"
)

// Limits LinkedIn enforces on text, checked before sending so the model gets
// a precise message instead of a generic 422.
const (
	MaxPostLength    = 3000
	MaxCommentLength = 1250
)

// Config configures a Client. Zero fields take the documented defaults.
type Config struct {
	// BaseURL is the API origin; default DefaultBaseURL.
	BaseURL string
	// Version is sent as the LinkedIn-Version header (YYYYMM); default
	// DefaultVersion.
	Version string
	// HTTPClient sends the requests; default a client with no overall
	// timeout (AttemptTimeout bounds each attempt instead).
	HTTPClient *http.Client
	// AttemptTimeout bounds one HTTP attempt; default 20s.
	AttemptTimeout time.Duration
	// MaxAttempts bounds the attempts of one call, retries included;
	// default 4.
	MaxAttempts int
	// MaxElapsed bounds one call, retries and waits included; default 60s.
	MaxElapsed time.Duration
	// Backoff is the first retry delay, doubled per retry up to MaxBackoff,
	// when LinkedIn gives no Retry-After; default 500ms.
	Backoff time.Duration
	// MaxBackoff caps the computed delay; default 8s.
	MaxBackoff time.Duration
	// Sleep waits between attempts; default a timer that stops early when
	// ctx ends. Tests replace it to observe the delays without waiting.
	Sleep func(ctx context.Context, d time.Duration) error
	// Logger gets one line per failed attempt; tokens are never logged.
	Logger zerolog.Logger
}

// Client talks to LinkedIn. It is safe for concurrent use.
type Client struct {
	base       string
	version    string
	http       *http.Client
	attempt    time.Duration
	attempts   int
	maxElapsed time.Duration
	backoff    time.Duration
	maxBackoff time.Duration
	sleep      func(ctx context.Context, d time.Duration) error
	log        zerolog.Logger
}

// New returns a Client for cfg.
func New(cfg Config) *Client {
	c := &Client{
		base:       strings.TrimRight(cfg.BaseURL, "/"),
		version:    cfg.Version,
		http:       cfg.HTTPClient,
		attempt:    cfg.AttemptTimeout,
		attempts:   cfg.MaxAttempts,
		maxElapsed: cfg.MaxElapsed,
		backoff:    cfg.Backoff,
		maxBackoff: cfg.MaxBackoff,
		sleep:      cfg.Sleep,
		log:        cfg.Logger.With().Str("component", "linkedin").Logger(),
	}
	if c.base == "" {
		c.base = DefaultBaseURL
	}
	if c.version == "" {
		c.version = DefaultVersion
	}
	if c.http == nil {
		c.http = &http.Client{}
	}
	if c.attempt <= 0 {
		c.attempt = 20 * time.Second
	}
	if c.attempts <= 0 {
		c.attempts = 4
	}
	if c.maxElapsed <= 0 {
		c.maxElapsed = 60 * time.Second
	}
	if c.backoff <= 0 {
		c.backoff = 500 * time.Millisecond
	}
	if c.maxBackoff <= 0 {
		c.maxBackoff = 8 * time.Second
	}
	if c.sleep == nil {
		c.sleep = sleepCtx
	}
	return c
}

// Version is the LinkedIn-Version header this client sends.
func (c *Client) Version() string { return c.version }

// ErrNoID means LinkedIn accepted a create but did not say what it created.
var ErrNoID = errors.New("linkedin answered without the id of the created entity")

// APIError is a non-success answer from LinkedIn.
type APIError struct {
	Method string
	Path   string
	// Status is the HTTP status code.
	Status int
	// Code is LinkedIn's symbolic error code (e.g. INVALID_ACCESS_TOKEN), if
	// any.
	Code string
	// Message is LinkedIn's message, or the start of the body when it is
	// not LinkedIn's JSON error shape.
	Message string
	// RetryAfter is the wait LinkedIn asked for on a 429/503, if any.
	RetryAfter time.Duration
}

// Error says what LinkedIn answered: method, path, status, code and message.
func (e *APIError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	if e.Code != "" {
		msg = e.Code + ": " + msg
	}
	return fmt.Sprintf("linkedin %s %s: %d %s", e.Method, e.Path, e.Status, msg)
}

// Temporary reports whether trying again later may succeed.
func (e *APIError) Temporary() bool { return retryable(e.Status) }

// CreatePost publishes text as a public feed post by acct.Author and returns
// the new post's URN (urn:li:share:… or urn:li:ugcPost:…).
func (c *Client) CreatePost(ctx context.Context, acct Account, text string) (string, error) {
	body := map[string]any{
		"author":     acct.Author,
		"commentary": EscapeLittleText(text),
		"visibility": "PUBLIC",
		"distribution": map[string]any{
			"feedDistribution":               "MAIN_FEED",
			"targetEntities":                 []any{},
			"thirdPartyDistributionChannels": []any{},
		},
		"lifecycleState":            "PUBLISHED",
		"isReshareDisabledByAuthor": false,
	}
	resp, err := c.do(ctx, acct, http.MethodPost, "/rest/posts", body)
	if err != nil {
		return "", fmt.Errorf("create post: %w", err)
	}
	urn := resp.header.Get("X-RestLi-Id")
	if urn == "" {
		urn = resp.header.Get("X-LinkedIn-Id")
	}
	if urn == "" {
		return "", fmt.Errorf("create post: %w", ErrNoID)
	}
	return urn, nil
}

// Comment is one comment as LinkedIn returns it.
type Comment struct {
	// URN is the comment's own URN, usable as a parent for replies.
	URN string
	// Actor is who wrote it.
	Actor string
	// Object is the post (activity) it belongs to.
	Object string
	// ParentComment is set for replies.
	ParentComment string
	Text          string
	Created       time.Time
}

// CommentPage is one page of comments.
type CommentPage struct {
	Comments []Comment
	// Total is LinkedIn's count of all comments, which may exceed the page.
	Total int
}

// wireComment is the comment shape of the socialActions API.
type wireComment struct {
	URN           string `json:"$URN"`
	CommentURN    string `json:"commentUrn"`
	ID            string `json:"id"`
	Actor         string `json:"actor"`
	Object        string `json:"object"`
	ParentComment string `json:"parentComment"`
	Message       struct {
		Text string `json:"text"`
	} `json:"message"`
	Created struct {
		Time int64 `json:"time"`
	} `json:"created"`
}

func (w wireComment) comment() Comment {
	c := Comment{
		URN:           w.CommentURN,
		Actor:         w.Actor,
		Object:        w.Object,
		ParentComment: w.ParentComment,
		Text:          w.Message.Text,
	}
	if c.URN == "" {
		c.URN = w.URN
	}
	if c.URN == "" && w.ID != "" && w.Object != "" {
		c.URN = "urn:li:comment:(" + w.Object + "," + w.ID + ")"
	}
	if w.Created.Time > 0 {
		c.Created = time.UnixMilli(w.Created.Time).UTC()
	}
	return c
}

// Comments lists the first page (up to 100) of comments on a post, or the
// replies to a comment when thread is a comment URN.
func (c *Client) Comments(ctx context.Context, acct Account, thread string) (CommentPage, error) {
	resp, err := c.do(ctx, acct, http.MethodGet, socialActionsPath(thread)+"?start=0&count=100", nil)
	if err != nil {
		return CommentPage{}, fmt.Errorf("read comments: %w", err)
	}
	var page struct {
		Elements []wireComment `json:"elements"`
		Paging   struct {
			Total int `json:"total"`
		} `json:"paging"`
	}
	if err := json.Unmarshal(resp.body, &page); err != nil {
		return CommentPage{}, fmt.Errorf("read comments: decode answer: %w", err)
	}
	out := CommentPage{Total: page.Paging.Total}
	for _, w := range page.Elements {
		out.Comments = append(out.Comments, w.comment())
	}
	if out.Total < len(out.Comments) {
		out.Total = len(out.Comments)
	}
	return out, nil
}

// CreateComment comments text on the post and returns the comment's URN.
func (c *Client) CreateComment(ctx context.Context, acct Account, post, text string) (string, error) {
	body := map[string]any{
		"actor":   acct.Author,
		"object":  post,
		"message": map[string]any{"text": text},
	}
	urn, err := c.createComment(ctx, acct, socialActionsPath(post), post, body)
	if err != nil {
		return "", fmt.Errorf("create comment: %w", err)
	}
	return urn, nil
}

// ReplyToComment answers the comment parent (on post) with text and returns
// the reply's URN. LinkedIn models a reply as a comment posted on the parent
// comment, naming it as parentComment.
func (c *Client) ReplyToComment(ctx context.Context, acct Account, post, parent, text string) (string, error) {
	body := map[string]any{
		"actor":         acct.Author,
		"object":        post,
		"parentComment": parent,
		"message":       map[string]any{"text": text},
	}
	urn, err := c.createComment(ctx, acct, socialActionsPath(parent), post, body)
	if err != nil {
		return "", fmt.Errorf("reply to comment: %w", err)
	}
	return urn, nil
}

func (c *Client) createComment(ctx context.Context, acct Account, path, post string, body any) (string, error) {
	resp, err := c.do(ctx, acct, http.MethodPost, path, body)
	if err != nil {
		return "", err
	}
	var w wireComment
	if len(bytes.TrimSpace(resp.body)) > 0 {
		if err := json.Unmarshal(resp.body, &w); err != nil {
			return "", fmt.Errorf("decode answer: %w", err)
		}
	}
	if w.ID == "" {
		w.ID = resp.header.Get("X-RestLi-Id")
	}
	if w.Object == "" {
		w.Object = post
	}
	if urn := w.comment().URN; urn != "" {
		return urn, nil
	}
	return "", ErrNoID
}

// socialActionsPath is the comments collection of a post or comment. The URN
// is a single path segment, so every reserved character in it (":", "(",
// ",", ")") is percent-encoded, as LinkedIn requires.
func socialActionsPath(urn string) string {
	return "/rest/socialActions/" + url.QueryEscape(urn) + "/comments"
}

// EscapeLittleText escapes the characters that LinkedIn's "little text"
// format (used by a post's commentary) reserves. Unescaped, LinkedIn may cut
// the published text at the first of them while still answering 201.
func EscapeLittleText(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		if strings.ContainsRune(`\|{}@[]()<>#*_~`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

type response struct {
	status int
	header http.Header
	body   []byte
}

// maxBody bounds what is read from LinkedIn; a comment page is far smaller.
const maxBody = 8 << 20

// do sends one API call with retries: 429 and 5xx answers are retried after
// Retry-After (when LinkedIn sends one) or an exponential backoff with
// jitter, within MaxAttempts and MaxElapsed. Transport errors are retried only
// for GET: a POST that failed in flight may have been applied, and posting
// twice is worse than reporting the failure.
func (c *Client) do(ctx context.Context, acct Account, method, path string, body any) (*response, error) {
	if strings.TrimSpace(acct.AccessToken) == "" {
		return nil, errors.New("no access token")
	}
	var payload []byte
	if body != nil {
		var err error
		if payload, err = json.Marshal(body); err != nil {
			return nil, fmt.Errorf("encode request: %w", err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, c.maxElapsed)
	defer cancel()
	logPath, _, _ := strings.Cut(path, "?")
	for attempt := 1; ; attempt++ {
		resp, err := c.once(ctx, acct, method, path, payload)
		var wait time.Duration
		switch {
		case err == nil && resp.status >= 200 && resp.status < 300:
			return resp, nil
		case err == nil:
			apiErr := apiError(method, logPath, resp)
			if !retryable(resp.status) {
				return nil, apiErr
			}
			err = apiErr
			wait = apiErr.RetryAfter
		case ctx.Err() != nil:
			return nil, fmt.Errorf("linkedin %s %s: %w", method, logPath, context.Cause(ctx))
		case method != http.MethodGet:
			return nil, fmt.Errorf("linkedin %s %s: %w", method, logPath, err)
		}
		if wait <= 0 {
			wait = c.backoffFor(attempt)
		}
		deadline, _ := ctx.Deadline()
		if attempt >= c.attempts || time.Until(deadline) < wait {
			return nil, err
		}
		c.log.Warn().Err(err).Str("method", method).Str("path", logPath).
			Int("attempt", attempt).Dur("wait", wait).Msg("linkedin call failed, retrying")
		if serr := c.sleep(ctx, wait); serr != nil {
			return nil, fmt.Errorf("%w (gave up waiting to retry: %w)", err, serr)
		}
	}
}

func (c *Client) once(ctx context.Context, acct Account, method, path string, payload []byte) (*response, error) {
	ctx, cancel := context.WithTimeout(ctx, c.attempt)
	defer cancel()
	var rd io.Reader
	if payload != nil {
		rd = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+acct.AccessToken)
	req.Header.Set("LinkedIn-Version", c.version)
	req.Header.Set("X-Restli-Protocol-Version", "2.0.0")
	req.Header.Set("Accept", "application/json")
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, maxBody))
	if err != nil {
		return nil, fmt.Errorf("read answer: %w", err)
	}
	return &response{status: res.StatusCode, header: res.Header, body: data}, nil
}

func retryable(status int) bool {
	return status == http.StatusTooManyRequests || status >= 500
}

// backoffFor is the delay before retry number attempt (1-based): Backoff
// doubled per attempt, capped, with the upper half jittered so that several
// sessions throttled together do not come back in lockstep.
func (c *Client) backoffFor(attempt int) time.Duration {
	d := c.backoff
	for i := 1; i < attempt && d < c.maxBackoff; i++ {
		d *= 2
	}
	d = min(d, c.maxBackoff)
	half := d / 2
	return half + rand.N(half+1)
}

func apiError(method, path string, resp *response) *APIError {
	e := &APIError{Method: method, Path: path, Status: resp.status}
	var body struct {
		Message          string `json:"message"`
		Code             string `json:"code"`
		ServiceErrorCode int    `json:"serviceErrorCode"`
	}
	if json.Unmarshal(resp.body, &body) == nil && body.Message != "" {
		e.Message = body.Message
		e.Code = body.Code
	} else {
		e.Message = strings.Join(strings.Fields(string(resp.body)), " ")
		if len(e.Message) > 300 {
			e.Message = e.Message[:300] + "…"
		}
	}
	e.RetryAfter = parseRetryAfter(resp.header.Get("Retry-After"), time.Now())
	return e
}

// parseRetryAfter reads delay-seconds or an HTTP date; anything else is 0.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.Atoi(v); err == nil {
		if secs < 0 {
			return 0
		}
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0)
	}
	return 0
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}
