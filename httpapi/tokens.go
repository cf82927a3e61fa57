package httpapi

import (
	"encoding/base64"
	"errors"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	qrcode "github.com/skip2/go-qrcode"

	"github.com/majorhq/major/auth"
)

// listTokens lists the tokens that may act as the person: their devices
// (and tokens shared with others, which only the server's owner revokes),
// never a token or its digest. "current" marks the request's own.
func (s *Server) listTokens(c *gin.Context) {
	type token struct {
		auth.Token
		Current bool `json:"current"`
		Shared  bool `json:"shared"`
	}
	out := []token{}
	for _, t := range s.cfg.Auth.List(personOf(c)) {
		out = append(out, token{Token: t, Current: t.Name == c.GetString(tokenNameKey), Shared: len(t.Persons) > 1})
	}
	c.JSON(http.StatusOK, gin.H{"tokens": out})
}

// revokeToken revokes one of the person's own tokens by name; its
// requests end at once, this one's too if it is the request's own.
func (s *Server) revokeToken(c *gin.Context) {
	name := c.Param("name")
	if err := s.cfg.Auth.Revoke(personOf(c), name); err != nil {
		s.fail(c, err)
		return
	}
	s.log.Info().Str("person", personOf(c)).Str("revoked", name).Str("token_name", c.GetString(tokenNameKey)).Msg("a token was revoked")
	c.JSON(http.StatusOK, gin.H{"revoked": name})
}

// pairingRequest names the device to pair (optional).
type pairingRequest struct {
	Name string `json:"name"`
}

func (r *pairingRequest) fromForm(v url.Values) error {
	r.Name = v.Get("name")
	return nil
}

// createPairing makes a pairing code for a new device of the person: the
// code, the link that redeems it on the device (the server's address and
// the code, in the fragment, so no log or Referer carries it) and that
// link as a QR code (PNG, base64).
func (s *Server) createPairing(c *gin.Context) {
	var req pairingRequest
	if c.Request.ContentLength != 0 {
		if err := decodeBody(c.Request, s.cfg.MaxBody, &req); err != nil {
			s.fail(c, err)
			return
		}
	}
	if strings.TrimSpace(req.Name) == "" {
		req.Name = "Device"
	}
	p, err := s.cfg.Auth.Pair(personOf(c), strings.TrimSpace(req.Name))
	if err != nil {
		s.fail(c, err)
		return
	}
	origin := s.origin(c.Request)
	link := origin + "/app/#pair=" + p.Code
	png, err := qrcode.Encode(link, qrcode.Medium, 320)
	if err != nil {
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusCreated, gin.H{"code": p.Code, "url": link, "server": origin, "person": p.Person,
		"name": p.Name, "expires": p.Expires.UTC().Format(time.RFC3339), "qr_png": base64.StdEncoding.EncodeToString(png)})
}

// redeemRequest is a device redeeming a pairing code.
type redeemRequest struct {
	Code string `json:"code"`
	Name string `json:"name"`
}

func (r *redeemRequest) fromForm(v url.Values) error {
	r.Code, r.Name = v.Get("code"), v.Get("name")
	return nil
}

// redeemPairing gives the device that holds a pairing code its own
// token, once. A wrong code counts as a failed attempt of the client's
// address, like a wrong token.
func (s *Server) redeemPairing(c *gin.Context) {
	client := s.clientAddr(c.Request)
	if wait := s.failed.Wait(client); wait > 0 {
		c.Header("Retry-After", strconv.Itoa(int((wait+time.Second-1)/time.Second)))
		s.fail(c, &apiError{http.StatusTooManyRequests, "too many failed attempts from this address; wait and try again"})
		return
	}
	var req redeemRequest
	if err := decodeBody(c.Request, s.cfg.MaxBody, &req); err != nil {
		s.fail(c, err)
		return
	}
	tok, id, err := s.cfg.Auth.Redeem(req.Code, strings.TrimSpace(req.Name))
	if errors.Is(err, auth.ErrBadCode) {
		s.failed.Fail(client)
		s.log.Warn().Str("client", client).Msg("pairing failed: unknown, used or expired code")
	}
	if err != nil {
		s.fail(c, err)
		return
	}
	c.Set(tokenNameKey, id.Name)
	c.Set(personKey, id.Persons[0])
	c.JSON(http.StatusCreated, gin.H{"token": tok, "name": id.Name, "person": id.Persons[0], "server": s.origin(c.Request)})
}

// origin is the server's address as the client reached it: its scheme
// and host, as a trusted proxy says they were.
func (s *Server) origin(r *http.Request) string {
	scheme, host := "http", r.Host
	if r.TLS != nil {
		scheme = "https"
	}
	if peer, err := netip.ParseAddr(peerAddr(r)); err == nil && s.trusted(peer) {
		if p := r.Header.Get("X-Forwarded-Proto"); p == "https" || p == "http" {
			scheme = p
		}
		if h := r.Header.Get("X-Forwarded-Host"); h != "" && !strings.ContainsAny(h, "/ ,") {
			host = h
		}
	}
	return scheme + "://" + host
}
