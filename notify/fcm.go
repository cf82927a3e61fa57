package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/jwt"
)

// DefaultFCMEndpoint is where FCM HTTP v1 messages are sent.
const DefaultFCMEndpoint = "https://fcm.googleapis.com"

// fcmScope is the OAuth scope of sending FCM messages.
const fcmScope = "https://www.googleapis.com/auth/firebase.messaging"

// FCMCredentials are the parts of a Firebase service account key file
// (the JSON the Firebase console downloads) that sending needs.
type FCMCredentials struct {
	Type        string `json:"type"`
	ProjectID   string `json:"project_id"`
	PrivateKey  string `json:"private_key"`
	ClientEmail string `json:"client_email"`
	TokenURI    string `json:"token_uri"`
}

var projectID = regexp.MustCompile(`^[a-z][a-z0-9-]{4,61}[a-z0-9]$`)

// LoadFCMCredentials reads a service account key file.
func LoadFCMCredentials(path string) (FCMCredentials, error) {
	var c FCMCredentials
	data, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("read FCM credentials: %w", err)
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return c, fmt.Errorf("FCM credentials %s: not a service account key file: %w", path, err)
	}
	if c.TokenURI == "" {
		c.TokenURI = "https://oauth2.googleapis.com/token"
	}
	switch {
	case c.Type != "service_account":
		return c, fmt.Errorf("FCM credentials %s: type is %q, not service_account", path, c.Type)
	case !projectID.MatchString(c.ProjectID):
		return c, fmt.Errorf("FCM credentials %s: project_id %q is not a project id", path, c.ProjectID)
	case c.ClientEmail == "" || !strings.Contains(c.PrivateKey, "PRIVATE KEY"):
		return c, fmt.Errorf("FCM credentials %s: client_email and private_key are required", path)
	}
	if u, err := url.Parse(c.TokenURI); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return c, fmt.Errorf("FCM credentials %s: token_uri %q is not a URL", path, c.TokenURI)
	}
	return c, nil
}

// fcm sends FCM HTTP v1 messages to the Android app: a data message
// (type, session_id, request_id, title, body, and the actions as JSON)
// that the app turns into its notification, with an OAuth token of the
// service account (JWT bearer grant, golang.org/x/oauth2/jwt).
type fcm struct {
	endpoint string
	project  string
	tokens   oauth2.TokenSource
	client   *http.Client
	content  string
}

func newFCM(creds FCMCredentials, endpoint, content string, client *http.Client) *fcm {
	conf := &jwt.Config{Email: creds.ClientEmail, PrivateKey: []byte(creds.PrivateKey), Scopes: []string{fcmScope}, TokenURL: creds.TokenURI}
	// The token requests use the same bounded client as the sends.
	ctx := context.WithValue(context.Background(), oauth2.HTTPClient, client)
	return &fcm{endpoint: strings.TrimRight(endpoint, "/"), project: creds.ProjectID, tokens: conf.TokenSource(ctx),
		client: client, content: content}
}

type fcmMessage struct {
	Message struct {
		Token   string            `json:"token"`
		Data    map[string]string `json:"data"`
		Android struct {
			Priority string `json:"priority"`
		} `json:"android"`
	} `json:"message"`
}

// fcmLimit is the most an FCM data payload may be.
const fcmLimit = 4000

func (f *fcm) send(ctx context.Context, d Device, p Payload) error {
	if f.content != ContentFull {
		p = p.Summarized()
	}
	p.fit(fcmLimit - 200)
	tok, err := f.tokens.Token()
	if err != nil {
		return fmt.Errorf("fcm: service account token: %w", err)
	}
	actions, _ := json.Marshal(p.Actions)
	var m fcmMessage
	m.Message.Token = d.Token
	m.Message.Data = map[string]string{"type": p.Type, "session_id": p.SessionID, "request_id": p.RequestID,
		"title": p.Title, "body": p.Body, "actions": string(actions)}
	m.Message.Android.Priority = "HIGH"
	body, err := json.Marshal(m)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.endpoint+"/v1/projects/"+f.project+"/messages:send", bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("fcm: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	tok.SetAuthHeader(req)
	resp, err := f.client.Do(req)
	if err != nil {
		return fmt.Errorf("fcm: %w", err)
	}
	text := drain(resp)
	switch {
	case resp.StatusCode == http.StatusNotFound || (resp.StatusCode/100 == 4 && strings.Contains(text, "UNREGISTERED")):
		// The app was uninstalled or its token replaced.
		return errGone
	case resp.StatusCode/100 != 2:
		return fmt.Errorf("fcm: %w", &statusError{resp.StatusCode, text})
	}
	return nil
}
