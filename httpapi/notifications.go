package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/majorhq/major/notify"
	"github.com/majorhq/major/relay"
)

// The notification endpoints: the push configuration a browser subscribes
// with, the person's devices, their notification settings (and a test
// notification), the page visibility the web client reports, and the
// actions of a notification, which answer a request with no credential
// but their token. What to send, to whom and when is package notify's;
// answering goes through the session core as a card's answer does.

// publishConfirmation is the message a draft approved from a
// notification runs its turn with: the person's confirmation, in their
// words as the draft asked for them.
const publishConfirmation = "Yes, publish it."

// pageID names a page of the web client for its visibility reports.
var pageID = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// watch counts a client of the person's session as watching it until
// the returned func is called (a no-op without notifications).
func (s *Server) watch(person, session, page string, visible bool) (end func()) {
	if s.cfg.Notify == nil {
		return func() {}
	}
	return s.cfg.Notify.Watch(person, session, page, visible)
}

// eventsPage is the page an events stream belongs to (?page=) and
// whether it is visible now (?visible=, default true).
func eventsPage(c *gin.Context) (page string, visible bool, err error) {
	page, visible = c.Query("page"), true
	if page != "" && !pageID.MatchString(page) {
		return "", false, badRequest("page is up to 64 letters, digits, - and _")
	}
	if v := c.Query("visible"); v != "" {
		if visible, err = formBool(c.Request.URL.Query(), "visible"); err != nil {
			return "", false, err
		}
	}
	return page, visible, nil
}

func (s *Server) pushConfig(c *gin.Context) {
	c.JSON(http.StatusOK, gin.H{"vapid_public_key": s.cfg.Notify.VAPIDPublicKey()})
}

// deviceRequest registers a device.
type deviceRequest struct {
	notify.NewDevice
}

func (r *deviceRequest) fromForm(v url.Values) error {
	r.Kind, r.Name, r.URL, r.Token = v.Get("kind"), v.Get("name"), v.Get("url"), v.Get("token")
	if sub := v.Get("subscription"); sub != "" {
		r.Subscription = &notify.Subscription{}
		if err := json.Unmarshal([]byte(sub), r.Subscription); err != nil {
			return badRequest("subscription must be the browser's push subscription as JSON")
		}
	}
	return nil
}

func (r *deviceRequest) validate() error {
	if r.Kind == "" {
		return badRequest("kind is required: webpush, ntfy or fcm")
	}
	return nil
}

func (s *Server) addDevice(c *gin.Context) {
	var req deviceRequest
	if !s.bind(c, &req) {
		return
	}
	info, err := s.cfg.Notify.AddDevice(personOf(c), req.NewDevice)
	if err != nil {
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusCreated, info)
}

func (s *Server) listDevices(c *gin.Context) {
	c.JSON(http.StatusOK, gin.H{"devices": s.cfg.Notify.Devices(personOf(c))})
}

func (s *Server) removeDevice(c *gin.Context) {
	if err := s.cfg.Notify.RemoveDevice(personOf(c), c.Param("id")); err != nil {
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"removed": true})
}

// settingsView is a person's notification settings as the endpoint shows
// them: every event named when all are chosen.
func settingsView(p notify.Preferences) notify.Preferences {
	if p.Events == nil {
		p.Events = notify.Types
	}
	return p
}

func (s *Server) getNotifications(c *gin.Context) {
	c.JSON(http.StatusOK, settingsView(s.cfg.Notify.Preferences(personOf(c))))
}

// settingsRequest is the person's notification settings.
type settingsRequest struct {
	notify.Preferences
}

func (*settingsRequest) fromForm(url.Values) error {
	return badRequest(`send the settings as JSON: {"events": [...], "quiet_hours": {"from", "to", "tz"} or null}`)
}

func (*settingsRequest) validate() error { return nil }

func (s *Server) putNotifications(c *gin.Context) {
	var req settingsRequest
	if !s.bind(c, &req) {
		return
	}
	person := personOf(c)
	if err := s.cfg.Notify.SetPreferences(person, req.Preferences); err != nil {
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, settingsView(s.cfg.Notify.Preferences(person)))
}

// testNotification sends a test notification to each of the person's
// devices and says how it went on each.
func (s *Server) testNotification(c *gin.Context) {
	if err := decodeOptional(c, s.cfg.MaxBody); err != nil {
		s.fail(c, err)
		return
	}
	res := s.cfg.Notify.Test(personOf(c))
	sent := 0
	for _, r := range res {
		if r.Error == "" {
			sent++
		}
	}
	c.JSON(http.StatusOK, gin.H{"sent": sent, "results": res})
}

// presenceRequest is a page of the web client saying whether it is
// visible.
type presenceRequest struct {
	Page    string `json:"page"`
	Visible bool   `json:"visible"`
}

func (r *presenceRequest) fromForm(v url.Values) (err error) {
	r.Page = v.Get("page")
	r.Visible, err = formBool(v, "visible")
	return err
}

func (r *presenceRequest) validate() error {
	if !pageID.MatchString(r.Page) {
		return badRequest("page is required: up to 64 letters, digits, - and _")
	}
	return nil
}

func (s *Server) presence(c *gin.Context) {
	var req presenceRequest
	if !s.bind(c, &req) {
		return
	}
	known := s.cfg.Notify.SetVisible(personOf(c), req.Page, req.Visible)
	c.JSON(http.StatusOK, gin.H{"known": known})
}

// errActionGone is an action whose request can no longer be answered.
var errActionGone = &apiError{http.StatusGone, "this action is no longer valid: the request was answered, ended or timed out"}

// action applies the decision of a notification's action: the token is
// the only credential. Its request is answered through the session core,
// as a card answers it; a draft approved here runs its turn at once with
// the person's confirmation, and publishes exactly its words once.
func (s *Server) action(c *gin.Context) {
	// A client that sends a person along (the web client does) must be
	// that person; the token alone decides otherwise.
	claim, err := s.cfg.Notify.Redeem(c.Param("token"), c.GetHeader("X-Notes-Person"))
	if err != nil {
		s.fail(c, err)
		return
	}
	chat, err := s.cfg.Registry.Get(claim.SessionID, claim.Person)
	if err != nil {
		s.fail(c, errActionGone)
		return
	}
	d := claim.Decision
	var msg string
	switch d.Kind {
	case notify.TypeQuestion:
		err = chat.Answer("question", claim.RequestID, relay.Answer{Answers: map[string]string{d.Question: d.Label}})
		msg = "Answered: " + d.Label
	case notify.TypePermission:
		err = chat.Answer("permission", claim.RequestID, relay.Answer{Allow: d.Allow})
		msg = map[bool]string{true: "Allowed.", false: "Denied."}[d.Allow]
	case notify.TypeDraft:
		// A draft is answered as a card answers it: approved for the
		// next turn, which the confirmation starts now.
		err = chat.Answer("permission", claim.RequestID, relay.Answer{Allow: d.Allow})
		msg = "Declined: nothing is published."
		if err == nil && d.Allow {
			msg = "Approved: it is being published."
			if err := s.runConfirmation(chat); err != nil {
				s.log.Warn().Err(err).Str("session", chat.ID).Msg("a draft approved from a notification could not run its turn")
				msg = "Approved: it is published with your next message in the chat (" + s.clientText(c, err.Error()) + ")."
			}
		}
	default:
		err = errActionGone
	}
	if errors.Is(err, relay.ErrAlreadyAnswered) || errors.Is(err, relay.ErrUnknownRequest) {
		err = errActionGone
	}
	if err != nil {
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"outcome": "answered", "session_id": chat.ID, "request_id": claim.RequestID, "message": msg})
}

// runConfirmation starts the turn an approved draft runs in, with the
// person's confirmation as its message (refused for a spent budget as any
// message is).
func (s *Server) runConfirmation(chat *relay.Session) error {
	if err := s.cfg.Registry.Admit(chat, publishConfirmation); err != nil {
		return err
	}
	_, err := s.cfg.Registry.Submit(chat, publishConfirmation, relay.SubmitOptions{})
	return err
}

// actionsPath starts the path of a notification's action, whose last
// element is its token.
const actionsPath = "/api/claude/actions/"

// loggedPath is a request's path as the log may show it: an action's
// token is a credential, so it is left out.
func loggedPath(p string) string {
	if strings.HasPrefix(p, actionsPath) {
		return actionsPath + "[token]"
	}
	return p
}
