package httpapi

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/majorhq/major/attachments"
	"github.com/majorhq/major/relay"
)

// A message may carry files: in a multipart/form-data body (the usual
// fields, and one or more parts named files), or uploaded ahead with the
// attachments endpoint and named by their ids. It may also attach notes
// of the person's. The files are saved in the person's vault as they
// arrive (package attachments); a request that fails anywhere, or a
// message that joins the same message sent before, removes the files it
// saved.

// uploadTime bounds how long a multipart request may take to send its
// body (files from a phone take a while), in place of the server's read
// timeout.
const uploadTime = 10 * time.Minute

// pendingMessage is a chat request's message with what it carries, until
// the session has taken it.
type pendingMessage struct {
	attached relay.Attached
	upload   *attachments.Upload
}

// settle keeps the files the request saved if the session took the
// message as a new one (t carries them), and removes them otherwise.
func (m *pendingMessage) settle(t *relay.Ticket) {
	if m.upload == nil {
		return
	}
	saved := m.upload.Files()
	if t != nil && len(saved) > 0 && slices.ContainsFunc(t.Files(), func(f attachments.File) bool { return f.ID == saved[0].ID }) {
		m.upload.Keep()
		return
	}
	m.upload.Discard()
}

// bindMessage reads a chat request (JSON, form or multipart) and what its
// message carries, answering the client on failure; nothing it saved is
// left behind then.
func (s *Server) bindMessage(c *gin.Context, req *chatRequest) (*pendingMessage, bool) {
	m := &pendingMessage{}
	ct, _, _ := mime.ParseMediaType(c.GetHeader("Content-Type"))
	if ct != "multipart/form-data" {
		if !s.bind(c, req) {
			return nil, false
		}
	} else {
		upload, err := s.readMultipart(c, req)
		if err == nil {
			err = req.validate()
		}
		if err != nil {
			if upload != nil {
				upload.Discard()
			}
			s.fail(c, err)
			return nil, false
		}
		m.upload = upload
	}
	if err := s.attach(c, req, m); err != nil {
		m.settle(nil)
		s.fail(c, err)
		return nil, false
	}
	return m, true
}

// attach gathers what the message carries: the files of the request,
// those it names by id, and the notes it attaches.
func (s *Server) attach(c *gin.Context, req *chatRequest, m *pendingMessage) error {
	if len(req.Attachments) == 0 && len(req.Attach) == 0 && req.files == 0 {
		return nil
	}
	store := s.cfg.Attachments
	if store == nil {
		return &apiError{http.StatusNotImplemented, "this server takes no attachments"}
	}
	person := personOf(c)
	var files []attachments.File
	if m.upload != nil {
		files = m.upload.Files()
	}
	ahead, err := store.Lookup(person, req.Attachments)
	if err != nil {
		return err
	}
	files = append(files, ahead...)
	content, err := store.Content(person, files, req.Attach)
	if err != nil {
		return err
	}
	m.attached = relay.Attached{Files: files, Notes: content.Notes, Content: content}
	return nil
}

// readMultipart reads a multipart chat or upload request: its fields into
// req, its files (parts named files) into the person's vault. The body
// may be as large as the files of one message and 1 MiB of fields.
func (s *Server) readMultipart(c *gin.Context, req *chatRequest) (*attachments.Upload, error) {
	store := s.cfg.Attachments
	if store == nil {
		return nil, &apiError{http.StatusUnsupportedMediaType, "this server takes no files; send application/json or application/x-www-form-urlencoded"}
	}
	// Files take longer to send than the server's read timeout allows
	// for a request; the body's size is bounded below.
	_ = http.NewResponseController(c.Writer).SetReadDeadline(time.Now().Add(uploadTime))
	limit := store.Limits().MessageBytes + s.cfg.MaxBody
	c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, limit)
	mr, err := c.Request.MultipartReader()
	if err != nil {
		return nil, badRequest("malformed multipart body: %v", err)
	}
	upload := store.Begin(c.Request.Context(), personOf(c))
	vals := url.Values{}
	fields := int64(0)
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return upload, multipartError(err, limit)
		}
		if part.FormName() == "files" || fileName(part) != "" {
			if part.FormName() != "files" {
				return upload, badRequest("a file must be sent in a part named files, not %q", part.FormName())
			}
			req.files++
			if _, err := upload.Add(fileName(part), part.Header.Get("Content-Type"), part); err != nil {
				return upload, err
			}
			continue
		}
		v, err := io.ReadAll(io.LimitReader(part, s.cfg.MaxBody-fields+1))
		if err != nil {
			return upload, multipartError(err, limit)
		}
		if fields += int64(len(v)); fields > s.cfg.MaxBody {
			return upload, &apiError{http.StatusRequestEntityTooLarge, fmt.Sprintf("the fields of the request are over the %d byte limit", s.cfg.MaxBody)}
		}
		vals.Add(part.FormName(), string(v))
	}
	n := req.files
	if err := req.fromForm(vals); err != nil {
		return upload, err
	}
	req.files = n
	return upload, nil
}

// fileName is the file name a part was sent with, exactly as sent:
// multipart.Part.FileName keeps only its last element, which would hide a
// name like ../../x instead of refusing it.
func fileName(p *multipart.Part) string {
	_, params, err := mime.ParseMediaType(p.Header.Get("Content-Disposition"))
	if err != nil {
		return ""
	}
	return params["filename"]
}

// multipartError is the client's error for a multipart body that could
// not be read: too large, or cut off.
func multipartError(err error, limit int64) error {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return &apiError{http.StatusRequestEntityTooLarge, fmt.Sprintf("the request is more than the %s it may have", attachments.Size(limit))}
	}
	if strings.Contains(err.Error(), "malformed MIME header") {
		// A raw control character in a file name lands here: a header
		// line cannot hold one (filename* can, and is checked by name).
		return badRequest("a part of the multipart body has a malformed header, such as a file name with a control character (%v); nothing was saved", err)
	}
	return badRequest("%v: the multipart body ended before it was complete (%v); nothing was saved", attachments.ErrCutOff, err)
}

// uploadAttachments saves files ahead of a message:
// {attachments:[{id, name, path, media_type, size}]}.
func (s *Server) uploadAttachments(c *gin.Context) {
	if _, ok := s.session(c); !ok {
		return
	}
	ct, _, _ := mime.ParseMediaType(c.GetHeader("Content-Type"))
	if ct != "multipart/form-data" {
		s.fail(c, &apiError{http.StatusUnsupportedMediaType, "send the files as multipart/form-data, in parts named files"})
		return
	}
	var req chatRequest
	upload, err := s.readMultipart(c, &req)
	if err == nil && req.files == 0 {
		err = badRequest("no files: send them in parts named files")
	}
	if err != nil {
		if upload != nil {
			upload.Discard()
		}
		s.fail(c, err)
		return
	}
	upload.Keep()
	c.JSON(http.StatusCreated, gin.H{"attachments": upload.Files()})
}
