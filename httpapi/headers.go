package httpapi

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"io"
	"net/http"
	"path"
	"strings"

	"github.com/gin-gonic/gin"
)

// contentSecurityPolicy is the web client's: its scripts, styles,
// connections (the API, the streams, the terminal's WebSocket), images and
// forms from its own origin only (images also from blob: URLs, the notes
// the page fetched with its token and shows; an image runs no script); no
// inline script, no frame may hold it.
// Styles also come from style elements made by the page's own scripts
// (the terminal emulator draws its cells with them): those carry the
// page's nonce, which injected markup cannot know.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'%s; connect-src 'self'; " +
	"img-src 'self' data: blob:; font-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// securityHeaders puts the headers every answer carries: no content-type
// sniffing, no Referer sent from the client's pages, and, for everything
// but the page itself (which gets a nonce), the content security policy.
func (s *Server) securityHeaders(c *gin.Context) {
	h := c.Writer.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Content-Security-Policy", strings.Replace(contentSecurityPolicy, "%s", "", 1))
	c.Next()
}

// static serves the web client's files; the page itself gets a nonce of
// its own in its policy and in its csp-nonce meta tag, from which the
// client's scripts give it to the style elements they make.
func (s *Server) static(c *gin.Context) {
	name := path.Clean("/" + c.Param("filepath"))
	if name != "/" && name != "/index.html" {
		http.StripPrefix("/app", http.FileServer(s.cfg.Static)).ServeHTTP(c.Writer, c.Request)
		return
	}
	f, err := s.cfg.Static.Open("/index.html")
	if err != nil {
		s.fail(c, &apiError{http.StatusNotFound, "no web client"})
		return
	}
	defer f.Close()
	page, err := io.ReadAll(f)
	if err != nil {
		s.fail(c, err)
		return
	}
	b := make([]byte, 18)
	_, _ = rand.Read(b)
	nonce := base64.StdEncoding.EncodeToString(b)
	page = bytes.Replace(page, []byte(`<meta name="csp-nonce" content="">`), []byte(`<meta name="csp-nonce" content="`+nonce+`">`), 1)
	c.Header("Content-Security-Policy", strings.Replace(contentSecurityPolicy, "%s", " 'nonce-"+nonce+"'", 1))
	c.Header("Cache-Control", "no-store")
	c.Data(http.StatusOK, "text/html; charset=utf-8", page)
}
