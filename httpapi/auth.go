package httpapi

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/majorhq/major/auth"
	"github.com/majorhq/major/relay"
	"github.com/majorhq/major/vault"
)

// Auth is who may use the API: the token file, read again when it
// changes (package auth).
type Auth = auth.Store

// NewAuth is an Auth of fixed tokens (token -> persons), for tests and
// embedding; the server reads its token file with auth.Open.
func NewAuth(tokens map[string][]string) (*Auth, error) { return auth.FromTokens(tokens) }

const (
	personKey    = "major.person"
	tokenNameKey = "major.token_name"
	tokenIDKey   = "major.token_id"
)

func personOf(c *gin.Context) string { return c.GetString(personKey) }

// authenticate checks the bearer token and the person it acts as. A
// client address that failed too often lately is refused (429) whatever
// it sends, until it has waited; failures are logged with the address,
// never the token. The request ends when its token is revoked: a stream
// stops then.
func (s *Server) authenticate(c *gin.Context) {
	client := s.clientAddr(c.Request)
	if wait := s.failed.Wait(client); wait > 0 {
		c.Header("Retry-After", strconv.Itoa(int((wait+time.Second-1)/time.Second)))
		s.fail(c, &apiError{http.StatusTooManyRequests, "too many failed sign-in attempts from this address; wait and try again"})
		return
	}
	h := c.GetHeader("Authorization")
	token, ok := strings.CutPrefix(h, "Bearer ")
	person := c.GetHeader("X-Notes-Person")
	if h == "" {
		// A browser's WebSocket offers them as subprotocols.
		token, person = websocketCredentials(c.Request)
		ok = token != ""
	}
	if !ok || token == "" {
		s.fail(c, &apiError{http.StatusUnauthorized, "missing bearer token"})
		return
	}
	id, ok := s.cfg.Auth.Authenticate(token)
	if !ok {
		s.failed.Fail(client)
		s.log.Warn().Str("client", client).Str("route", c.FullPath()).Msg("authentication failed: unknown token")
		s.fail(c, &apiError{http.StatusUnauthorized, "invalid token"})
		return
	}
	c.Set(tokenNameKey, id.Name)
	c.Set(tokenIDKey, id.ID)
	if !vault.ValidPerson(person) {
		s.fail(c, badRequest("X-Notes-Person must be a plain lowercase name"))
		return
	}
	if !id.Can(person) {
		s.fail(c, &apiError{http.StatusForbidden, "this token may not act as " + person})
		return
	}
	c.Set(personKey, person)
	if s.cfg.Moving != nil && s.cfg.Moving(person) {
		s.fail(c, relay.ErrMoving)
		return
	}
	ctx, cancel := context.WithCancel(c.Request.Context())
	defer cancel()
	done := s.open.add(id.ID, cancel)
	defer done()
	c.Request = c.Request.WithContext(ctx)
	c.Next()
}

// openRequests are the authenticated requests in progress by token, so
// a revoked token's streams are ended.
type openRequests struct {
	mu   sync.Mutex
	next int
	byID map[string]map[int]context.CancelFunc
}

func (o *openRequests) add(id string, cancel context.CancelFunc) (done func()) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.byID == nil {
		o.byID = map[string]map[int]context.CancelFunc{}
	}
	if o.byID[id] == nil {
		o.byID[id] = map[int]context.CancelFunc{}
	}
	o.next++
	n := o.next
	o.byID[id][n] = cancel
	return func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		delete(o.byID[id], n)
		if len(o.byID[id]) == 0 {
			delete(o.byID, id)
		}
	}
}

// end cancels the requests of every token valid no longer says is valid.
func (o *openRequests) end(valid func(id string) bool) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for id, reqs := range o.byID {
		if valid(id) {
			continue
		}
		for _, cancel := range reqs {
			cancel()
			n++
		}
	}
	return n
}

// closeRevoked ends the open requests of tokens the token file no longer
// holds.
func (s *Server) closeRevoked() {
	if n := s.open.end(s.cfg.Auth.Valid); n > 0 {
		s.log.Info().Int("requests", n).Msg("closed the open requests of revoked tokens")
	}
}

// clientAddr is the address a request came from: its peer's, or, when
// the peer is a trusted proxy, the last address in X-Forwarded-For that
// is not one (a client can put anything in front of that header, not
// behind what the proxy appends).
func (s *Server) clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	addr, err := netip.ParseAddr(host)
	if err != nil || !s.trusted(addr) {
		return host
	}
	var hops []string
	for _, v := range r.Header.Values("X-Forwarded-For") {
		hops = append(hops, strings.Split(v, ",")...)
	}
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			break
		}
		if !s.trusted(a) {
			return a.Unmap().String()
		}
		host = a.Unmap().String()
	}
	return host
}

func (s *Server) trusted(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range s.cfg.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ParseTrustedProxies parses a comma-separated list of addresses and
// networks (CIDR) whose X-Forwarded-For is believed.
func ParseTrustedProxies(list string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, v := range strings.Split(list, ",") {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		if p, err := netip.ParsePrefix(v); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(v)
		if err != nil {
			return nil, fmt.Errorf("%q is not an address or a network (CIDR)", v)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}

// peerAddr is the address of the request's peer.
func peerAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
