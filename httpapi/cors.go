package httpapi

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/gin-gonic/gin"
)

// ParseOrigins reads a comma-separated list of browser origins
// (scheme://host[:port]) that may call the API from pages of their own.
// Anything else, a wildcard included, is an error: only origins named one
// by one get CORS headers.
func ParseOrigins(spec string) ([]string, error) {
	var out []string
	for _, o := range strings.Split(spec, ",") {
		o = strings.TrimSpace(o)
		if o == "" {
			continue
		}
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
			u.User != nil || u.Path != "" || u.RawQuery != "" || u.Fragment != "" || strings.Contains(o, "*") {
			return nil, fmt.Errorf("%q is not an origin: write scheme://host[:port], e.g. https://notes.example.com", o)
		}
		out = append(out, strings.ToLower(o))
	}
	return out, nil
}

// corsAllowHeaders are the request headers a page may send: the seed
// clients' own.
const corsAllowHeaders = "Authorization, X-Notes-Person, Content-Type, Accept"

// cors answers cross-origin requests from the configured origins only: a
// request from any other origin gets no CORS header, so the browser keeps
// its response from the page. Preflights (OPTIONS) are answered here,
// before authentication, which they never carry.
func cors(origins []string) gin.HandlerFunc {
	allowed := map[string]bool{}
	for _, o := range origins {
		allowed[o] = true
	}
	return func(c *gin.Context) {
		h := c.Writer.Header()
		h.Add("Vary", "Origin")
		origin := c.GetHeader("Origin")
		if !allowed[origin] {
			c.Next()
			return
		}
		h.Set("Access-Control-Allow-Origin", origin)
		if c.Request.Method == http.MethodOptions && c.GetHeader("Access-Control-Request-Method") != "" {
			h.Add("Vary", "Access-Control-Request-Method")
			h.Add("Vary", "Access-Control-Request-Headers")
			h.Set("Access-Control-Allow-Methods", "GET, POST, PUT, DELETE")
			h.Set("Access-Control-Allow-Headers", corsAllowHeaders)
			h.Set("Access-Control-Max-Age", "600")
			c.AbortWithStatus(http.StatusNoContent)
			return
		}
		h.Set("Access-Control-Expose-Headers", "Retry-After")
		c.Next()
	}
}
