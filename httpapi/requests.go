package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/majorhq/major/attachments"
)

// DefaultMaxBody is the largest request body accepted (1 MiB): far above
// any chat message a person types, small enough that no client can make
// the server buffer much.
const DefaultMaxBody = 1 << 20

// apiError is an error with the HTTP status and the message a client sees.
type apiError struct {
	status int
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &apiError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

// formDecoder is a request body that can also come form-encoded.
type formDecoder interface {
	fromForm(url.Values) error
}

// decodeBody reads a JSON or form-encoded body of at most limit bytes into
// v. The existing clients send both encodings for the same endpoints.
func decodeBody(r *http.Request, limit int64, v formDecoder) error {
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, limit))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return &apiError{status: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("request body is over the %d byte limit", limit)}
		}
		return badRequest("read request body: %v", err)
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	trimmed := bytes.TrimSpace(body)
	switch {
	case ct == "application/x-www-form-urlencoded" || (ct == "" && len(trimmed) > 0 && trimmed[0] != '{'):
		vals, err := url.ParseQuery(string(body))
		if err != nil {
			return badRequest("malformed form body: %v", err)
		}
		return v.fromForm(vals)
	case ct == "" || ct == "application/json" || strings.HasSuffix(ct, "+json"):
		if len(trimmed) == 0 {
			return badRequest("request body is empty")
		}
		dec := json.NewDecoder(bytes.NewReader(trimmed))
		if err := dec.Decode(v); err != nil {
			return badRequest("malformed JSON body: %v", err)
		}
		if dec.More() {
			return badRequest("malformed JSON body: more than one value")
		}
		return nil
	default:
		return &apiError{status: http.StatusUnsupportedMediaType, msg: "send application/json or application/x-www-form-urlencoded, not " + ct}
	}
}

func formBool(vals url.Values, key string) (bool, error) {
	s := vals.Get(key)
	if s == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, badRequest("%s must be true or false", key)
	}
	return b, nil
}

// chatRequest is the body of chat-stream, chat and the messages endpoint.
// Attachments are the ids of files uploaded ahead, Attach the paths of
// notes to attach (attachments.go). Steer gives the message to the
// session's running turn, if one runs (not with files or notes).
type chatRequest struct {
	Message     string   `json:"message"`
	SessionID   string   `json:"session_id"`
	Interactive bool     `json:"interactive"`
	Attachments []string `json:"attachments"`
	Attach      []string `json:"attach"`
	Steer       bool     `json:"steer"`

	// files counts the files of a multipart body.
	files int
}

func (r *chatRequest) fromForm(v url.Values) (err error) {
	r.Message, r.SessionID = v.Get("message"), v.Get("session_id")
	r.Attachments, r.Attach = formList(v, "attachments"), formList(v, "attach")
	if r.Interactive, err = formBool(v, "interactive"); err != nil {
		return err
	}
	r.Steer, err = formBool(v, "steer")
	return err
}

func (r *chatRequest) validate() error {
	if strings.TrimSpace(r.Message) == "" && r.files == 0 && len(r.Attachments) == 0 && len(r.Attach) == 0 {
		return badRequest("message is required and must not be empty")
	}
	return nil
}

// formList is a form's comma-separated list (possibly given in several
// fields), without empty items.
func formList(vals url.Values, key string) []string {
	var out []string
	for _, v := range vals[key] {
		for _, item := range strings.Split(v, ",") {
			if item = strings.TrimSpace(item); item != "" {
				out = append(out, item)
			}
		}
	}
	return out
}

// createRequest is the body of a new session: an optional conversation
// to continue (a list in JSON, a JSON list in a form's history field).
type createRequest struct {
	History []attachments.HistoryEntry `json:"history"`
}

func (r *createRequest) fromForm(v url.Values) error {
	if s := v.Get("history"); s != "" {
		if err := json.Unmarshal([]byte(s), &r.History); err != nil {
			return badRequest("%v: history must be a JSON list of {role, content}: %v", attachments.ErrBadHistory, err)
		}
	}
	return nil
}

func (r *createRequest) validate() error { return attachments.CheckHistory(r.History) }

// clearRequest is the body of clear.
type clearRequest struct {
	SessionID string `json:"session_id"`
}

func (r *clearRequest) fromForm(v url.Values) error {
	r.SessionID = v.Get("session_id")
	return nil
}

// answerRequest answers a question.
type answerRequest struct {
	RequestID string            `json:"request_id"`
	Answers   map[string]string `json:"answers"`
}

func (r *answerRequest) fromForm(v url.Values) error {
	r.RequestID = v.Get("request_id")
	if s := v.Get("answers"); s != "" {
		if err := json.Unmarshal([]byte(s), &r.Answers); err != nil {
			return badRequest("answers must be a JSON object of question -> answer")
		}
	}
	return nil
}

func (r *answerRequest) validate() error {
	if r.RequestID == "" {
		return badRequest("request_id is required")
	}
	if len(r.Answers) == 0 {
		return badRequest("answers is required: an object of question text -> chosen label or text")
	}
	return nil
}

// permissionRequest answers a permission prompt.
type permissionRequest struct {
	RequestID string `json:"request_id"`
	Behavior  string `json:"behavior"`
	Message   string `json:"message"`
	Remember  bool   `json:"remember"`
}

func (r *permissionRequest) fromForm(v url.Values) (err error) {
	r.RequestID, r.Behavior, r.Message = v.Get("request_id"), v.Get("behavior"), v.Get("message")
	r.Remember, err = formBool(v, "remember")
	return err
}

func (r *permissionRequest) validate() error {
	if r.RequestID == "" {
		return badRequest("request_id is required")
	}
	if r.Behavior != "allow" && r.Behavior != "deny" {
		return badRequest(`behavior must be "allow" or "deny"`)
	}
	return nil
}

// emptyRequest is a body that may be empty or any JSON object.
type emptyRequest struct{}

func (*emptyRequest) fromForm(url.Values) error { return nil }

// modelRequest switches a session's model.
type modelRequest struct {
	Model string `json:"model"`
}

func (r *modelRequest) fromForm(v url.Values) error {
	r.Model = v.Get("model")
	return nil
}

func (r *modelRequest) validate() error {
	if strings.TrimSpace(r.Model) == "" {
		return badRequest("model is required")
	}
	return nil
}

// titleRequest gives a chat a title (the relay checks its length).
type titleRequest struct {
	Title string `json:"title"`
}

func (r *titleRequest) fromForm(v url.Values) error {
	r.Title = v.Get("title")
	return nil
}

func (r *titleRequest) validate() error {
	if strings.TrimSpace(r.Title) == "" {
		return badRequest("title is required")
	}
	return nil
}

// pinRequest pins a chat or unpins it.
type pinRequest struct {
	Pinned *bool `json:"pinned"`
}

func (r *pinRequest) fromForm(v url.Values) error {
	b, err := strconv.ParseBool(v.Get("pinned"))
	if err != nil {
		return badRequest("pinned must be true or false")
	}
	r.Pinned = &b
	return nil
}

func (r *pinRequest) validate() error {
	if r.Pinned == nil {
		return badRequest("pinned (true or false) is required")
	}
	return nil
}

// permissionModeRequest sets a session's permission mode.
type permissionModeRequest struct {
	Mode string `json:"mode"`
}

func (r *permissionModeRequest) fromForm(v url.Values) error {
	r.Mode = v.Get("mode")
	return nil
}

func (r *permissionModeRequest) validate() error {
	if r.Mode == "" {
		return badRequest("mode is required")
	}
	return nil
}

// thinkingRequest sets how a session thinks: its thinking budget, its
// effort, or both.
type thinkingRequest struct {
	MaxThinkingTokens *int    `json:"max_thinking_tokens"`
	Effort            *string `json:"effort"`
}

func (r *thinkingRequest) fromForm(v url.Values) error {
	if v.Has("effort") {
		e := v.Get("effort")
		r.Effort = &e
	}
	s := v.Get("max_thinking_tokens")
	if s == "" {
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return badRequest("max_thinking_tokens must be a whole number")
	}
	r.MaxThinkingTokens = &n
	return nil
}

func (r *thinkingRequest) validate() error {
	if r.MaxThinkingTokens == nil && r.Effort == nil {
		return badRequest("max_thinking_tokens (0: the default) or effort is required")
	}
	return nil
}

// rewindRequest rewinds a session to before one of the person's messages.
type rewindRequest struct {
	MessageID string `json:"message_id"`
	DryRun    bool   `json:"dry_run"`
	// Files defaults to true; Conversation to false.
	Files        *bool `json:"files"`
	Conversation bool  `json:"conversation"`
}

func (r *rewindRequest) fromForm(v url.Values) (err error) {
	r.MessageID = v.Get("message_id")
	if r.DryRun, err = formBool(v, "dry_run"); err != nil {
		return err
	}
	if v.Get("files") != "" {
		f, err := formBool(v, "files")
		if err != nil {
			return err
		}
		r.Files = &f
	}
	r.Conversation, err = formBool(v, "conversation")
	return err
}

func (r *rewindRequest) validate() error {
	if r.MessageID == "" {
		return badRequest("message_id is required: the id of one of your messages (turn-N-user)")
	}
	if r.Files != nil && !*r.Files && !r.Conversation {
		return badRequest("nothing to rewind: files is false and conversation is not true")
	}
	return nil
}

// carriesFiles reports whether the message brings files or notes with
// it: such a message is never steered into a running turn (its content
// goes with a turn of its own).
func (r *chatRequest) carriesFiles() bool {
	return r.files > 0 || len(r.Attachments) > 0 || len(r.Attach) > 0
}
