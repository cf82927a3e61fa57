package notifytest

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/majorhq/major/notify"
)

// NtfyMessage is one message ntfy got through JSON publishing.
type NtfyMessage struct {
	Topic    string `json:"topic"`
	Title    string `json:"title"`
	Message  string `json:"message"`
	Priority int    `json:"priority"`
	Click    string `json:"click"`
	Actions  []struct {
		Action string `json:"action"`
		Label  string `json:"label"`
		URL    string `json:"url"`
		Method string `json:"method"`
		Clear  bool   `json:"clear"`
	} `json:"actions"`
	// Authorization is the request's header.
	Authorization string `json:"-"`
}

// Ntfy is an ntfy server on loopback that takes JSON publishing (a POST
// of the message to its root URL) with an access token.
type Ntfy struct {
	// URL is the server's root; C gets every message.
	URL   string
	C     chan NtfyMessage
	token string
}

// NewNtfy starts an ntfy server that wants token (as a bearer token) on
// every publish, closed when the test ends.
func NewNtfy(tb testing.TB, token string) *Ntfy {
	tb.Helper()
	n := &Ntfy{C: make(chan NtfyMessage, 64), token: token}
	srv := httptest.NewServer(http.HandlerFunc(n.serve))
	n.URL = srv.URL
	tb.Cleanup(srv.Close)
	return n
}

func (n *Ntfy) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/" {
		http.Error(w, `{"error":"publish as JSON to the root URL"}`, http.StatusNotFound)
		return
	}
	if n.token != "" && r.Header.Get("Authorization") != "Bearer "+n.token {
		http.Error(w, `{"code":40101,"error":"unauthorized"}`, http.StatusUnauthorized)
		return
	}
	var m NtfyMessage
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&m); err != nil || m.Topic == "" {
		http.Error(w, `{"error":"not a JSON message with a topic"}`, http.StatusBadRequest)
		return
	}
	m.Authorization = r.Header.Get("Authorization")
	select {
	case n.C <- m:
	default:
	}
	_, _ = fmt.Fprintf(w, `{"id":"x","event":"message","topic":%q}`, m.Topic)
}

// FCMMessage is one message FCM got for a device.
type FCMMessage struct {
	Project string
	Token   string
	Data    map[string]string
}

// FCM is FCM HTTP v1 on loopback with the OAuth token endpoint of a
// service account it made: a send needs an access token the endpoint
// gave for an assertion signed with the account's key.
type FCM struct {
	// URL is the endpoint (Config's FCM endpoint); C gets every message.
	URL string
	C   chan FCMMessage
	// Credentials are the service account's, its token_uri the fake's.
	Credentials notify.FCMCredentials

	key    *rsa.PrivateKey
	mu     sync.Mutex
	access map[string]bool
	gone   map[string]bool
}

// NewFCM starts FCM for a service account of project, closed when the
// test ends.
func NewFCM(tb testing.TB, project string) *FCM {
	tb.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		tb.Fatal(err)
	}
	der, _ := x509.MarshalPKCS8PrivateKey(key)
	f := &FCM{C: make(chan FCMMessage, 64), key: key, access: map[string]bool{}, gone: map[string]bool{}}
	srv := httptest.NewServer(http.HandlerFunc(f.serve))
	tb.Cleanup(srv.Close)
	f.URL = srv.URL
	f.Credentials = notify.FCMCredentials{Type: "service_account", ProjectID: project, ClientEmail: "major@" + project + ".iam.gserviceaccount.com",
		PrivateKey: string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})), TokenURI: srv.URL + "/token"}
	return f
}

// CredentialsFile writes the service account's key file in the test's
// temp folder and returns its path.
func (f *FCM) CredentialsFile(tb testing.TB) string {
	tb.Helper()
	data, _ := json.Marshal(f.Credentials)
	path := filepath.Join(tb.TempDir(), "fcm-service-account.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		tb.Fatal(err)
	}
	return path
}

// Unregister makes FCM answer that the device token no longer exists.
func (f *FCM) Unregister(token string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gone[token] = true
}

func (f *FCM) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.NotFound(w, r)
		return
	}
	if r.URL.Path == "/token" {
		f.token(w, r)
		return
	}
	project, ok := strings.CutPrefix(r.URL.Path, "/v1/projects/")
	project, ok2 := strings.CutSuffix(project, "/messages:send")
	if !ok || !ok2 {
		http.NotFound(w, r)
		return
	}
	f.mu.Lock()
	allowed := f.access[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]
	f.mu.Unlock()
	if !allowed || project != f.Credentials.ProjectID {
		http.Error(w, `{"error":{"code":401,"status":"UNAUTHENTICATED"}}`, http.StatusUnauthorized)
		return
	}
	var m struct {
		Message struct {
			Token string            `json:"token"`
			Data  map[string]string `json:"data"`
		} `json:"message"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&m); err != nil || m.Message.Token == "" {
		http.Error(w, `{"error":{"code":400,"status":"INVALID_ARGUMENT"}}`, http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	gone := f.gone[m.Message.Token]
	f.mu.Unlock()
	if gone {
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"error":{"code":404,"status":"NOT_FOUND","details":[{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"UNREGISTERED"}]}}`)
		return
	}
	select {
	case f.C <- FCMMessage{Project: project, Token: m.Message.Token, Data: m.Message.Data}:
	default:
	}
	_, _ = fmt.Fprintf(w, `{"name":"projects/%s/messages/1"}`, project)
}

// token answers the JWT bearer grant (RFC 7523) for an assertion signed
// (RS256) with the service account's key, issued by it, for the FCM
// scope and this endpoint.
func (f *FCM) token(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil || r.PostForm.Get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer" {
		http.Error(w, `{"error":"unsupported_grant_type"}`, http.StatusBadRequest)
		return
	}
	if err := f.checkAssertion(r.PostForm.Get("assertion")); err != nil {
		http.Error(w, fmt.Sprintf(`{"error":"invalid_grant","error_description":%q}`, err.Error()), http.StatusBadRequest)
		return
	}
	b := make([]byte, 18)
	_, _ = rand.Read(b)
	access := base64.RawURLEncoding.EncodeToString(b)
	f.mu.Lock()
	f.access[access] = true
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = fmt.Fprintf(w, `{"access_token":%q,"token_type":"Bearer","expires_in":3600}`, access)
}

func (f *FCM) checkAssertion(jwt string) error {
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		return errors.New("not a JWT")
	}
	var head struct{ Alg string }
	if err := decodeJSON(parts[0], &head); err != nil || head.Alg != "RS256" {
		return fmt.Errorf("alg %q", head.Alg)
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return err
	}
	digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if err := rsa.VerifyPKCS1v15(&f.key.PublicKey, crypto.SHA256, digest[:], sig); err != nil {
		return errors.New("signature does not verify with the service account's key")
	}
	var c struct {
		Iss   string `json:"iss"`
		Scope string `json:"scope"`
		Aud   string `json:"aud"`
		Exp   int64  `json:"exp"`
	}
	if err := decodeJSON(parts[1], &c); err != nil {
		return err
	}
	switch {
	case c.Iss != f.Credentials.ClientEmail:
		return fmt.Errorf("iss %q", c.Iss)
	case !strings.Contains(c.Scope, "https://www.googleapis.com/auth/firebase.messaging"):
		return fmt.Errorf("scope %q", c.Scope)
	case c.Aud != f.Credentials.TokenURI:
		return fmt.Errorf("aud %q", c.Aud)
	case c.Exp <= time.Now().Unix():
		return errors.New("expired")
	}
	return nil
}
