// Package linkedintest is a fake LinkedIn REST API on httptest for tests of
// code that posts and comments. It checks what a real LinkedIn would insist
// on (version and protocol headers, a known bearer token, the author that
// token belongs to, percent-encoded URNs, the body shapes) and answers the
// way LinkedIn does, including scripted failures such as 429 with
// Retry-After or a gateway error after the request was applied, and finds
// posts by author and comments by thread with paging; like LinkedIn's,
// its listings can lag behind what was created (SetListingLag).
package linkedintest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Request is one request the fake received.
type Request struct {
	Method string
	// Path is the escaped path, as sent.
	Path string
	// Token is the bearer token.
	Token  string
	Header http.Header
	Body   map[string]any
}

// Response is a scripted answer.
type Response struct {
	Status int
	Header http.Header
	// Body is sent as it is; when empty, a LinkedIn-style JSON error for
	// Status is sent.
	Body string
	// Apply handles the request as usual first (a post or comment is
	// created) and then answers Status instead of the real answer: a
	// gateway that gave up after LinkedIn applied the request.
	Apply bool
	// Method, when set, makes this the answer to the next request with
	// that method; requests with other methods pass it by.
	Method string
}

// Post is a post the fake holds.
type Post struct {
	URN        string
	Author     string
	Commentary string
}

// Server is the fake API.
type Server struct {
	// URL is the base URL to configure the client with.
	URL string
	// Version is the LinkedIn-Version every request must carry.
	Version string

	mu       sync.Mutex
	authors  map[string]string // token -> author URN
	requests []Request
	script   []Response
	comments map[string][]map[string]any // thread URN -> comments
	posts    []map[string]any            // oldest first
	nextID   int64
	// lag is how long a created post or comment stays out of the
	// listings; listed says from when each one is in them (by URN).
	lag    time.Duration
	listed map[string]time.Time
}

// New starts a fake that expects LinkedIn-Version version. It is closed when
// the test ends.
func New(tb testing.TB, version string) *Server {
	tb.Helper()
	s := &Server{
		Version:  version,
		authors:  map[string]string{},
		comments: map[string][]map[string]any{},
		nextID:   7000,
	}
	srv := httptest.NewServer(s)
	tb.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

// AddAccount makes token valid, acting as author.
func (s *Server) AddAccount(token, author string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.authors[token] = author
}

// Enqueue makes the next requests get these answers, in order, before any
// normal handling (the requests are still recorded).
func (s *Server) Enqueue(rs ...Response) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script = append(s.script, rs...)
}

// SetListingLag makes every post and comment created from now on show in
// the posts finder and the comment lists only d after it was created, as
// LinkedIn's listings may lag behind what it applied.
func (s *Server) SetListingLag(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lag = d
}

// listLaterLocked keeps the entity urn, just created, out of the listings
// for the lag. s.mu is held.
func (s *Server) listLaterLocked(urn string) {
	if s.lag <= 0 {
		return
	}
	if s.listed == nil {
		s.listed = map[string]time.Time{}
	}
	s.listed[urn] = time.Now().Add(s.lag)
}

// listedLocked reports whether the entity urn shows in the listings now.
// s.mu is held.
func (s *Server) listedLocked(urn string) bool {
	at, ok := s.listed[urn]
	return !ok || !time.Now().Before(at)
}

// AddComment seeds a comment on thread (a post or comment URN) and returns
// its URN.
func (s *Server) AddComment(thread, actor, text string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Seeded comments get fixed times, so tests can show them.
	return s.addCommentLocked(thread, thread, "", actor, text, 1767225600000+s.nextID+1)
}

// Posts returns the posts created so far, oldest first.
func (s *Server) Posts() []Post {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Post, 0, len(s.posts))
	for _, p := range s.posts {
		out = append(out, Post{URN: str(p["id"]), Author: str(p["author"]), Commentary: str(p["commentary"])})
	}
	return out
}

// Comments returns the comments on thread (a post or comment URN), oldest
// first, as their texts.
func (s *Server) Comments(thread string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, c := range s.comments[thread] {
		msg, _ := c["message"].(map[string]any)
		out = append(out, str(msg["text"]))
	}
	return out
}

// Requests returns a copy of what was received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

func (s *Server) addCommentLocked(thread, object, parent, actor, text string, created int64) string {
	s.nextID++
	id := strconv.FormatInt(s.nextID, 10)
	activity := object
	if strings.HasPrefix(activity, "urn:li:share:") || strings.HasPrefix(activity, "urn:li:ugcPost:") {
		// LinkedIn keys comments by the post's activity; the fake keeps the
		// number so tests can follow it.
		activity = "urn:li:activity:" + activity[strings.LastIndex(activity, ":")+1:]
	}
	urn := "urn:li:comment:(" + activity + "," + id + ")"
	c := map[string]any{
		"$URN":       urn,
		"commentUrn": urn,
		"id":         id,
		"actor":      actor,
		"object":     object,
		"message":    map[string]any{"text": text},
		"created":    map[string]any{"actor": actor, "time": created},
	}
	if parent != "" {
		c["parentComment"] = parent
	}
	s.comments[thread] = append(s.comments[thread], c)
	return urn
}

// ServeHTTP implements the fake API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req := Request{
		Method: r.Method,
		Path:   r.URL.EscapedPath(),
		Token:  strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "),
		Header: r.Header.Clone(),
	}
	if r.Body != nil && r.Method == http.MethodPost {
		if err := json.NewDecoder(r.Body).Decode(&req.Body); err != nil {
			s.record(req)
			fail(w, http.StatusBadRequest, "ILLEGAL_ARGUMENT", "body is not JSON: "+err.Error())
			return
		}
	}
	s.mu.Lock()
	s.requests = append(s.requests, req)
	var scripted *Response
	for i, sr := range s.script {
		if sr.Method == "" || sr.Method == r.Method {
			scripted = &sr
			s.script = append(s.script[:i:i], s.script[i+1:]...)
			break
		}
	}
	author, known := s.authors[req.Token]
	s.mu.Unlock()

	if scripted != nil && scripted.Apply {
		// The real handling runs against a discarded answer.
		s.handle(discard{}, r, req, author, known)
	}
	if scripted != nil {
		for k, vs := range scripted.Header {
			for _, v := range vs {
				w.Header().Add(k, v)
			}
		}
		if scripted.Body == "" {
			fail(w, scripted.Status, "", http.StatusText(scripted.Status))
			return
		}
		w.WriteHeader(scripted.Status)
		_, _ = w.Write([]byte(scripted.Body))
		return
	}
	s.handle(w, r, req, author, known)
}

// discard is a ResponseWriter that drops the answer.
type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) WriteHeader(int)             {}

// handle answers one request as LinkedIn would.
func (s *Server) handle(w http.ResponseWriter, r *http.Request, req Request, author string, known bool) {
	switch {
	case r.Header.Get("LinkedIn-Version") != s.Version:
		fail(w, http.StatusBadRequest, "VERSION_MISSING", fmt.Sprintf("LinkedIn-Version must be %s, got %q", s.Version, r.Header.Get("LinkedIn-Version")))
		return
	case r.Header.Get("X-Restli-Protocol-Version") != "2.0.0":
		fail(w, http.StatusBadRequest, "ILLEGAL_ARGUMENT", "X-Restli-Protocol-Version must be 2.0.0")
		return
	case !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") || !known:
		fail(w, http.StatusUnauthorized, "INVALID_ACCESS_TOKEN", "Invalid access token")
		return
	case r.Method == http.MethodPost && !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json"):
		fail(w, http.StatusUnsupportedMediaType, "", "Content-Type must be application/json")
		return
	}

	path := r.URL.EscapedPath()
	switch {
	case r.Method == http.MethodPost && path == "/rest/posts":
		s.createPost(w, req.Body, author)
	case r.Method == http.MethodGet && path == "/rest/posts":
		s.findPosts(w, r.URL.Query(), author)
	case strings.HasPrefix(path, "/rest/socialActions/") && strings.HasSuffix(path, "/comments"):
		enc := strings.TrimSuffix(strings.TrimPrefix(path, "/rest/socialActions/"), "/comments")
		if strings.ContainsAny(enc, ":(),") {
			fail(w, http.StatusBadRequest, "ILLEGAL_ARGUMENT", "the URN in the path must be URL-encoded")
			return
		}
		thread, err := url.PathUnescape(enc)
		if err != nil {
			fail(w, http.StatusBadRequest, "ILLEGAL_ARGUMENT", "bad URN encoding")
			return
		}
		if r.Method == http.MethodGet {
			s.listComments(w, r.URL.Query(), thread)
			return
		}
		if r.Method == http.MethodPost {
			s.createComment(w, req.Body, thread, author)
			return
		}
		fail(w, http.StatusMethodNotAllowed, "", "method not allowed")
	default:
		fail(w, http.StatusNotFound, "", "no such resource: "+r.Method+" "+path)
	}
}

func (s *Server) record(req Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, req)
}

func (s *Server) createPost(w http.ResponseWriter, body map[string]any, author string) {
	dist, _ := body["distribution"].(map[string]any)
	switch {
	case body["author"] != author:
		fail(w, http.StatusForbidden, "ACCESS_DENIED", fmt.Sprintf("Not enough permissions to post as %v", body["author"]))
		return
	case str(body["commentary"]) == "":
		fail(w, http.StatusUnprocessableEntity, "", "commentary is required")
		return
	case body["visibility"] != "PUBLIC", body["lifecycleState"] != "PUBLISHED", dist == nil || dist["feedDistribution"] != "MAIN_FEED":
		fail(w, http.StatusUnprocessableEntity, "", "visibility, lifecycleState and distribution.feedDistribution are required")
		return
	}
	s.mu.Lock()
	s.nextID++
	urn := "urn:li:share:" + strconv.FormatInt(s.nextID, 10)
	now := time.Now().UnixMilli()
	s.posts = append(s.posts, map[string]any{
		"id": urn, "author": author, "commentary": body["commentary"],
		"visibility": body["visibility"], "lifecycleState": body["lifecycleState"],
		"distribution": body["distribution"],
		"createdAt":    now, "publishedAt": now, "lastModifiedAt": now,
	})
	s.listLaterLocked(urn)
	s.mu.Unlock()
	w.Header().Set("x-restli-id", urn)
	w.WriteHeader(http.StatusCreated)
}

func (s *Server) createComment(w http.ResponseWriter, body map[string]any, thread, author string) {
	msg, _ := body["message"].(map[string]any)
	object, parent := str(body["object"]), str(body["parentComment"])
	switch {
	case body["actor"] != author:
		fail(w, http.StatusForbidden, "ACCESS_DENIED", fmt.Sprintf("Not enough permissions to comment as %v", body["actor"]))
		return
	case msg == nil || str(msg["text"]) == "":
		fail(w, http.StatusUnprocessableEntity, "", "message.text is required")
		return
	case strings.HasPrefix(thread, "urn:li:comment:") && parent != thread:
		fail(w, http.StatusUnprocessableEntity, "", "a nested comment must name the comment in the path as parentComment")
		return
	case !strings.HasPrefix(thread, "urn:li:comment:") && (object != thread || parent != ""):
		fail(w, http.StatusUnprocessableEntity, "", "object must be the post in the path")
		return
	case object == "":
		fail(w, http.StatusUnprocessableEntity, "", "object is required")
		return
	}
	s.mu.Lock()
	s.listLaterLocked(s.addCommentLocked(thread, object, parent, author, str(msg["text"]), time.Now().UnixMilli()))
	c := s.comments[thread][len(s.comments[thread])-1]
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("x-restli-id", str(c["id"]))
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(c)
}

// paging reads start and count as LinkedIn does: count defaults to 10
// and is capped at max.
func paging(q url.Values, max int) (start, count int, err error) {
	start, count = 0, 10
	if v := q.Get("start"); v != "" {
		if start, err = strconv.Atoi(v); err != nil || start < 0 {
			return 0, 0, fmt.Errorf("start must be a non-negative number")
		}
	}
	if v := q.Get("count"); v != "" {
		if count, err = strconv.Atoi(v); err != nil || count < 0 {
			return 0, 0, fmt.Errorf("count must be a non-negative number")
		}
	}
	return start, min(count, max), nil
}

func page(elems []map[string]any, start, count int) []map[string]any {
	if start >= len(elems) {
		return []map[string]any{}
	}
	return elems[start:min(start+count, len(elems))]
}

// findPosts is the posts finder by author (q=author), newest first by
// lastModifiedAt, paged with start and count; like LinkedIn's it gives no
// total, only a "next" link while more may follow.
func (s *Server) findPosts(w http.ResponseWriter, q url.Values, author string) {
	if q.Get("q") != "author" || q.Get("author") == "" {
		fail(w, http.StatusBadRequest, "ILLEGAL_ARGUMENT", "the posts finder needs q=author and author")
		return
	}
	if q.Get("author") != author {
		fail(w, http.StatusForbidden, "ACCESS_DENIED", "Not enough permissions to read the posts of "+q.Get("author"))
		return
	}
	start, count, err := paging(q, 100)
	if err != nil {
		fail(w, http.StatusBadRequest, "ILLEGAL_ARGUMENT", err.Error())
		return
	}
	s.mu.Lock()
	var mine []map[string]any
	for i := len(s.posts) - 1; i >= 0; i-- {
		if s.posts[i]["author"] == author && s.listedLocked(str(s.posts[i]["id"])) {
			mine = append(mine, s.posts[i])
		}
	}
	s.mu.Unlock()
	elems := page(mine, start, count)
	pg := map[string]any{"start": start, "count": count, "links": []any{}}
	if start+len(elems) < len(mine) {
		next := url.Values{"q": {"author"}, "author": {author}, "start": {strconv.Itoa(start + count)}, "count": {strconv.Itoa(count)}}
		pg["links"] = []any{map[string]any{"rel": "next", "type": "application/json", "href": "/rest/posts?" + next.Encode()}}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"elements": elems, "paging": pg})
}

// listComments is a thread's comments, oldest first, paged with start and
// count (at most 100), with the total.
func (s *Server) listComments(w http.ResponseWriter, q url.Values, thread string) {
	start, count, err := paging(q, 100)
	if err != nil {
		fail(w, http.StatusBadRequest, "ILLEGAL_ARGUMENT", err.Error())
		return
	}
	s.mu.Lock()
	var all []map[string]any
	for _, c := range s.comments[thread] {
		if s.listedLocked(str(c["commentUrn"])) {
			all = append(all, c)
		}
	}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"elements": page(all, start, count),
		"paging":   map[string]any{"start": start, "count": count, "total": len(all)},
	})
}

// fail answers in LinkedIn's error shape.
func fail(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	body := map[string]any{"status": status, "message": msg}
	if code != "" {
		body["code"] = code
	}
	_ = json.NewEncoder(w).Encode(body)
}

func str(v any) string {
	s, _ := v.(string)
	return s
}
