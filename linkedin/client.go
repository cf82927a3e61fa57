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
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
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

// ErrOutcomeUnknown means a create got an answer that leaves open whether
// LinkedIn applied it (a gateway error, a timeout, a connection lost after
// the request went out), and looking for the result did not find it: it
// may be live all the same, since LinkedIn lists what it applied only
// after a while. It is never sent again.
var ErrOutcomeUnknown = errors.New("outcome unknown")

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
	commentary := body["commentary"].(string)
	resp, found, err := c.create(ctx, acct, "/rest/posts", body, c.findPost(acct, commentary, text))
	if err != nil {
		return "", fmt.Errorf("create post: %w", err)
	}
	if found != "" {
		return found, nil
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
	urn, err := c.createComment(ctx, acct, post, "", post, text, body)
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
	urn, err := c.createComment(ctx, acct, parent, parent, post, text, body)
	if err != nil {
		return "", fmt.Errorf("reply to comment: %w", err)
	}
	return urn, nil
}

// createComment posts body to thread's comments (the post, or the parent
// comment for a reply) and returns the new comment's URN.
func (c *Client) createComment(ctx context.Context, acct Account, thread, parent, post, text string, body any) (string, error) {
	resp, found, err := c.create(ctx, acct, socialActionsPath(thread), body, c.findComment(acct, thread, parent, text))
	if err != nil {
		return "", err
	}
	if found != "" {
		return found, nil
	}
	var w wireComment
	if len(bytes.TrimSpace(resp.body)) > 0 {
		if err := json.Unmarshal(resp.body, &w); err != nil {
			// The comment is live: an answer we cannot read must not read
			// as a failure (that invites sending it again).
			c.log.Warn().Err(err).Str("thread", thread).Msg("linkedin created a comment but its answer does not decode")
			w = wireComment{}
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
// for GET. Creates go through create instead, which never resends blindly.
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
		resp, _, err := c.once(ctx, acct, method, path, payload)
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
			Int("attempt", attempt).Dur("wait_ms", wait).Msg("linkedin call failed, retrying")
		if serr := c.sleep(ctx, wait); serr != nil {
			return nil, fmt.Errorf("%w (gave up waiting to retry: %w)", err, serr)
		}
	}
}

// once sends one attempt. sent reports whether any of the request reached
// the connection: before that, a failure proves LinkedIn never saw it.
func (c *Client) once(ctx context.Context, acct Account, method, path string, payload []byte) (resp *response, sent bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.attempt)
	defer cancel()
	var wrote atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteHeaderField: func(string, []string) { wrote.Store(true) }})
	resp, err = c.send(ctx, acct, method, path, payload)
	return resp, wrote.Load(), err
}

func (c *Client) send(ctx context.Context, acct Account, method, path string, payload []byte) (*response, error) {
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

// lookupSkew widens the window in which a lookup accepts an entity as the
// one a create made, for clock differences between this server and
// LinkedIn. An identical text published within it counts as this one.
const lookupSkew = 5 * time.Minute

// Lookups read at most lookupPages pages of lookupPageSize entries; a
// lookup that cannot finish within them proves nothing.
const (
	lookupPageSize = 50
	lookupPages    = 10
)

// finder looks for what a create would have made, among what was created
// since then: its URN, "" when it proves there is none, or an error.
type finder func(ctx context.Context, since time.Time) (string, error)

// create sends a create (POST) so that it is applied at most once. 429 and
// failures before the request went out prove nothing was applied and are
// retried as do retries. An ambiguous answer (a 5xx, a timeout, a
// connection lost after sending) is never sent again: LinkedIn may have
// applied it and list it only seconds later, so not finding it proves
// nothing. find looks for it once: found, that is the answer (proof that
// it was applied); not found, or the lookup failed, the error is
// ErrOutcomeUnknown. The answer is either a success response or the URN
// the lookup found.
func (c *Client) create(ctx context.Context, acct Account, path string, body any, find finder) (*response, string, error) {
	if strings.TrimSpace(acct.AccessToken) == "" {
		return nil, "", errors.New("no access token")
	}
	payload, err := json.Marshal(body)
	if err != nil {
		return nil, "", fmt.Errorf("encode request: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.maxElapsed)
	defer cancel()
	since := time.Now().Add(-lookupSkew)
	for attempt := 1; ; attempt++ {
		resp, sent, err := c.once(ctx, acct, http.MethodPost, path, payload)
		var wait time.Duration
		switch {
		case err == nil && resp.status >= 200 && resp.status < 300:
			return resp, "", nil
		case err == nil && resp.status == http.StatusTooManyRequests:
			apiErr := apiError(http.MethodPost, path, resp)
			err, wait = apiErr, apiErr.RetryAfter
		case err == nil && resp.status < 500:
			return nil, "", apiError(http.MethodPost, path, resp)
		case err != nil && !sent && ctx.Err() == nil:
			err = fmt.Errorf("linkedin POST %s: %w", path, err)
		default:
			if err == nil {
				err = apiError(http.MethodPost, path, resp)
			} else {
				err = fmt.Errorf("linkedin POST %s: %w", path, err)
			}
			urn, lerr := c.lookup(ctx, attempt, since, find)
			switch {
			case lerr != nil:
				return nil, "", fmt.Errorf("%w: LinkedIn answered %v, and looking for the result failed (%v); check LinkedIn before trying again", ErrOutcomeUnknown, err, lerr)
			case urn != "":
				c.log.Info().Str("path", path).Str("urn", urn).AnErr("answer", err).Msg("linkedin applied the create despite the error")
				return nil, urn, nil
			}
			c.log.Warn().Err(err).Str("path", path).Msg("linkedin's answer left open whether the create was applied; not sending it again")
			return nil, "", fmt.Errorf("%w: LinkedIn answered %v, and it does not list the result yet (it may list it later); check LinkedIn before trying again", ErrOutcomeUnknown, err)
		}
		if wait <= 0 {
			wait = c.backoffFor(attempt)
		}
		deadline, _ := ctx.Deadline()
		if attempt >= c.attempts || time.Until(deadline) < wait {
			return nil, "", err
		}
		c.log.Warn().Err(err).Str("path", path).Int("attempt", attempt).Dur("wait_ms", wait).Msg("linkedin create not applied, retrying")
		if serr := c.sleep(ctx, wait); serr != nil {
			return nil, "", fmt.Errorf("%w (gave up waiting to retry: %w)", err, serr)
		}
	}
}

// lookup waits a moment (what LinkedIn applied may take that long to be
// listed) and runs find.
func (c *Client) lookup(ctx context.Context, attempt int, since time.Time, find finder) (string, error) {
	if err := c.sleep(ctx, c.backoffFor(attempt)); err != nil {
		return "", err
	}
	return find(ctx, since)
}

// findPost looks for acct's post with this commentary (as sent, or as the
// plain text) through the posts finder by author, newest first.
func (c *Client) findPost(acct Account, commentary, text string) finder {
	return func(ctx context.Context, since time.Time) (string, error) {
		q := url.Values{"q": {"author"}, "author": {acct.Author}, "sortBy": {"LAST_MODIFIED"}, "count": {strconv.Itoa(lookupPageSize)}}
		for n := range lookupPages {
			q.Set("start", strconv.Itoa(n*lookupPageSize))
			resp, err := c.do(ctx, acct, http.MethodGet, "/rest/posts?"+q.Encode(), nil)
			if err != nil {
				return "", fmt.Errorf("find posts: %w", err)
			}
			var page struct {
				Elements []struct {
					ID             string `json:"id"`
					Author         string `json:"author"`
					Commentary     string `json:"commentary"`
					CreatedAt      int64  `json:"createdAt"`
					LastModifiedAt int64  `json:"lastModifiedAt"`
				} `json:"elements"`
				Paging struct {
					Links []struct {
						Rel string `json:"rel"`
					} `json:"links"`
				} `json:"paging"`
			}
			if err := json.Unmarshal(resp.body, &page); err != nil {
				return "", fmt.Errorf("find posts: decode answer: %w", err)
			}
			for _, p := range page.Elements {
				if p.Author == acct.Author && (p.Commentary == commentary || p.Commentary == text) &&
					(p.CreatedAt == 0 || !time.UnixMilli(p.CreatedAt).Before(since)) && p.ID != "" {
					return p.ID, nil
				}
				if p.LastModifiedAt > 0 && time.UnixMilli(p.LastModifiedAt).Before(since) {
					// Newest first: everything after this is older still.
					return "", nil
				}
			}
			next := false
			for _, l := range page.Paging.Links {
				next = next || l.Rel == "next"
			}
			if !next && len(page.Elements) < lookupPageSize {
				return "", nil
			}
		}
		return "", fmt.Errorf("find posts: more than %d recent posts", lookupPages*lookupPageSize)
	}
}

// findComment looks for acct's comment with this text (under parent, for a
// reply) among thread's comments.
func (c *Client) findComment(acct Account, thread, parent, text string) finder {
	return func(ctx context.Context, since time.Time) (string, error) {
		for n := range lookupPages {
			path := fmt.Sprintf("%s?start=%d&count=%d", socialActionsPath(thread), n*lookupPageSize, lookupPageSize)
			resp, err := c.do(ctx, acct, http.MethodGet, path, nil)
			if err != nil {
				return "", fmt.Errorf("find comments: %w", err)
			}
			var page struct {
				Elements []wireComment `json:"elements"`
				Paging   struct {
					Start int `json:"start"`
					Total int `json:"total"`
				} `json:"paging"`
			}
			if err := json.Unmarshal(resp.body, &page); err != nil {
				return "", fmt.Errorf("find comments: decode answer: %w", err)
			}
			for _, w := range page.Elements {
				cm := w.comment()
				if cm.Actor == acct.Author && cm.Text == text && cm.ParentComment == parent &&
					(cm.Created.IsZero() || !cm.Created.Before(since)) && cm.URN != "" {
					return cm.URN, nil
				}
			}
			if len(page.Elements) < lookupPageSize || n*lookupPageSize+len(page.Elements) >= page.Paging.Total {
				return "", nil
			}
		}
		return "", fmt.Errorf("find comments: more than %d comments", lookupPages*lookupPageSize)
	}
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
