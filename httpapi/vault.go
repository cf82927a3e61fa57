package httpapi

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/majorhq/major/attachments"
	"github.com/majorhq/major/vault"
)

// The person's notes, read-only, through the same guard as the file
// tools. A file served here is content the agent or another site may have
// written, and the web client's origin holds the bearer token: it must
// never run there. So every file goes out with nosniff and a sandboxing
// Content-Security-Policy (a document shown anyway runs no script and has
// an origin of its own), and anything but an image, a PDF or plain text
// (HTML, SVG, XML, ...) as a download, never shown inline.

// inlineTypes are the media types a file may be shown as in the browser;
// anything else is sent as a download.
var inlineTypes = map[string]bool{
	"image/jpeg": true, "image/png": true, "image/gif": true, "image/webp": true,
	"application/pdf": true, "text/plain": true, "text/markdown": true,
}

// fileSecurity are the headers of every file served from a vault.
func fileSecurity(h http.Header) {
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "sandbox; default-src 'none'; img-src 'self' data:; style-src 'unsafe-inline'")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	h.Set("Cache-Control", "private, no-cache")
}

// vaultError maps the guard's refusals for the notes endpoints: a
// protected name is not there at all (404).
func (s *Server) vaultError(c *gin.Context, err error) {
	if errors.Is(err, vault.ErrProtectedName) {
		err = &apiError{http.StatusNotFound, err.Error()}
	}
	s.fail(c, err)
}

// vaultTree lists one folder of the person's notes.
func (s *Server) vaultTree(c *gin.Context) {
	if s.cfg.Vault == nil {
		s.fail(c, &apiError{http.StatusNotImplemented, "this server does not serve the notes"})
		return
	}
	clean, entries, err := s.cfg.Vault.List(personOf(c), c.Query("path"))
	if err != nil {
		s.vaultError(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"path": clean, "entries": entries})
}

// vaultFile serves one file of the person's notes, with its media type and
// an ETag.
func (s *Server) vaultFile(c *gin.Context) {
	if s.cfg.Vault == nil {
		s.fail(c, &apiError{http.StatusNotImplemented, "this server does not serve the notes"})
		return
	}
	rel := c.Query("path")
	if rel == "" {
		s.fail(c, badRequest("path is required: a file in your folder"))
		return
	}
	f, st, err := s.cfg.Vault.Open(personOf(c), rel)
	if err != nil {
		s.vaultError(c, err)
		return
	}
	defer f.Close()
	h := c.Writer.Header()
	fileSecurity(h)
	etag := fmt.Sprintf(`"%x-%x"`, st.Size(), st.ModTime().UnixNano())
	h.Set("ETag", etag)
	if match := c.GetHeader("If-None-Match"); match != "" && etagMatches(match, etag) {
		c.Status(http.StatusNotModified)
		return
	}
	head := make([]byte, 512)
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		s.fail(c, fmt.Errorf("read %s: %w", rel, err))
		return
	}
	mt, _ := attachments.Sniff(rel, head[:n])
	contentType := mt
	if strings.HasPrefix(mt, "text/") {
		contentType += "; charset=utf-8"
	}
	disposition := "inline"
	if !inlineTypes[mt] {
		disposition = "attachment"
	}
	h.Set("Content-Disposition", mime.FormatMediaType(disposition, map[string]string{"filename": path.Base(rel)}))
	h.Set("Content-Type", contentType)
	h.Set("Content-Length", strconv.FormatInt(st.Size(), 10))
	c.Status(http.StatusOK)
	if c.Request.Method == http.MethodHead {
		return
	}
	if _, err := c.Writer.Write(head[:n]); err != nil {
		return
	}
	_, _ = io.Copy(c.Writer, io.LimitReader(f, st.Size()-int64(n)))
}

// etagMatches reports whether an If-None-Match header names etag.
func etagMatches(header, etag string) bool {
	for _, e := range strings.Split(header, ",") {
		e = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(e), "W/"))
		if e == etag || e == "*" {
			return true
		}
	}
	return false
}
