// Package notifytest provides stand-ins for the services notifications go
// through, on loopback: a Web Push service that decrypts each message
// with the subscription's private key (RFC 8291) and checks its VAPID
// signature (RFC 8292), an ntfy server that takes JSON publishing, and
// FCM HTTP v1 with its OAuth token endpoint. Each records what it got. It
// must not be imported by non-test code.
package notifytest

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/majorhq/major/notify"
)

// Push is one message the push service got, decrypted.
type Push struct {
	// Endpoint is the subscription's endpoint it was sent to.
	Endpoint string
	// Payload is the plain text, which the service decrypted with the
	// subscription's private key; Err says why it could not, or why the
	// push was refused (a bad VAPID signature, a wrong key).
	Payload []byte
	Err     error
	// Subject is the VAPID subject (sub claim).
	Subject string
	Header  http.Header
}

// Notification is Payload decoded; it fails tb if it does not decode.
func (p Push) Notification(tb testing.TB) notify.Payload {
	tb.Helper()
	if p.Err != nil {
		tb.Fatalf("push to %s: %v", p.Endpoint, p.Err)
	}
	var n notify.Payload
	if err := json.Unmarshal(p.Payload, &n); err != nil {
		tb.Fatalf("push payload %q: %v", p.Payload, err)
	}
	return n
}

type subscriber struct {
	key  *ecdh.PrivateKey
	auth []byte
}

// PushService is a Web Push service on loopback (plain http: the server
// under test must allow its host).
type PushService struct {
	// URL is the service's address; C gets every push, and Pushes lists
	// them.
	URL string
	C   chan Push

	srv *httptest.Server
	mu  sync.Mutex
	// vapid is the public key pushes must be signed with ("" : any).
	vapid  string
	subs   map[string]*subscriber
	status map[string]int
	got    []Push
}

// NewPushService starts a push service, closed when the test ends.
func NewPushService(tb testing.TB) *PushService {
	tb.Helper()
	p := &PushService{C: make(chan Push, 64), subs: map[string]*subscriber{}, status: map[string]int{}}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	p.URL = p.srv.URL
	tb.Cleanup(p.srv.Close)
	return p
}

// Expect makes the service refuse (401) pushes not signed with the VAPID
// key whose public half is publicKey (base64url).
func (p *PushService) Expect(publicKey string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.vapid = publicKey
}

// Subscribe makes a subscription, as a browser's PushManager does: a
// fresh P-256 key pair and auth secret, and an endpoint on the service.
func (p *PushService) Subscribe(tb testing.TB) notify.Subscription {
	tb.Helper()
	key, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	auth := make([]byte, 16)
	_, _ = rand.Read(auth)
	id := base64.RawURLEncoding.EncodeToString(auth[:9])
	p.mu.Lock()
	p.subs[id] = &subscriber{key: key, auth: auth}
	p.mu.Unlock()
	var s notify.Subscription
	s.Endpoint = p.URL + "/push/" + id
	s.Keys.P256dh = base64.RawURLEncoding.EncodeToString(key.PublicKey().Bytes())
	s.Keys.Auth = base64.RawURLEncoding.EncodeToString(auth)
	return s
}

// Answer makes the service answer status to every later push to
// endpoint (404 or 410: the subscription is gone).
func (p *PushService) Answer(endpoint string, status int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.status[strings.TrimPrefix(endpoint, p.URL+"/push/")] = status
}

// Pushes is every push so far.
func (p *PushService) Pushes() []Push {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Push(nil), p.got...)
}

func (p *PushService) serve(w http.ResponseWriter, r *http.Request) {
	id, ok := strings.CutPrefix(r.URL.Path, "/push/")
	if r.Method != http.MethodPost || !ok {
		http.NotFound(w, r)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 8192))
	push := Push{Endpoint: p.URL + r.URL.Path, Header: r.Header.Clone()}
	p.mu.Lock()
	sub, expect, status := p.subs[id], p.vapid, p.status[id]
	p.mu.Unlock()
	code := http.StatusCreated
	switch {
	case err != nil:
		push.Err, code = err, http.StatusBadRequest
	case sub == nil:
		push.Err, code = errors.New("unknown subscription"), http.StatusNotFound
	case r.Header.Get("Content-Encoding") != "aes128gcm" || r.Header.Get("TTL") == "":
		push.Err, code = fmt.Errorf("headers: Content-Encoding %q, TTL %q", r.Header.Get("Content-Encoding"), r.Header.Get("TTL")), http.StatusBadRequest
	default:
		if push.Subject, err = checkVAPID(r.Header.Get("Authorization"), p.URL, expect); err != nil {
			push.Err, code = fmt.Errorf("VAPID: %w", err), http.StatusUnauthorized
		} else if push.Payload, err = decrypt(body, sub); err != nil {
			push.Err, code = fmt.Errorf("decrypt: %w", err), http.StatusBadRequest
		}
	}
	if status != 0 && push.Err == nil {
		code = status
	}
	p.mu.Lock()
	p.got = append(p.got, push)
	p.mu.Unlock()
	select {
	case p.C <- push:
	default:
	}
	w.WriteHeader(code)
}

// checkVAPID verifies an "Authorization: vapid t=<JWT>, k=<key>" header
// (RFC 8292): an ES256 JWT signed with k, for audience, not expired and
// not valid for more than a day, with a subject; k must be expect unless
// expect is empty. It returns the subject.
func checkVAPID(header, audience, expect string) (string, error) {
	rest, ok := strings.CutPrefix(header, "vapid ")
	if !ok {
		return "", fmt.Errorf("authorization %q is not vapid", header)
	}
	var token, key string
	for _, part := range strings.Split(rest, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			token = v
		case "k":
			key = v
		}
	}
	if expect != "" && key != expect {
		return "", errors.New("signed with another key than the server's")
	}
	raw, err := base64.RawURLEncoding.DecodeString(key)
	if err != nil {
		return "", fmt.Errorf("k: %w", err)
	}
	pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), raw)
	if err != nil {
		return "", fmt.Errorf("k: %w", err)
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return "", errors.New("t is not a JWT")
	}
	var head struct{ Alg string }
	if err := decodeJSON(parts[0], &head); err != nil || head.Alg != "ES256" {
		return "", fmt.Errorf("JWT header: alg %q, %v", head.Alg, err)
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || len(sig) != 64 {
		return "", errors.New("JWT signature is not 64 bytes")
	}
	digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if !ecdsa.Verify(pub, digest[:], new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])) {
		return "", errors.New("JWT signature does not verify with k")
	}
	var claims struct {
		Aud string `json:"aud"`
		Exp int64  `json:"exp"`
		Sub string `json:"sub"`
	}
	if err := decodeJSON(parts[1], &claims); err != nil {
		return "", fmt.Errorf("JWT claims: %w", err)
	}
	now := time.Now().Unix()
	switch {
	case claims.Aud != audience:
		return "", fmt.Errorf("aud %q, want %q", claims.Aud, audience)
	case claims.Exp <= now || claims.Exp > now+24*3600:
		return "", fmt.Errorf("exp %d is not within the next 24 hours", claims.Exp)
	case !strings.HasPrefix(claims.Sub, "mailto:") && !strings.HasPrefix(claims.Sub, "https:"):
		return "", fmt.Errorf("sub %q is not a mailto: or https: URL", claims.Sub)
	}
	return claims.Sub, nil
}

func decodeJSON(part string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(part)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// decrypt opens an aes128gcm message (RFC 8188) encrypted for sub as RFC
// 8291 says: one record, its header the salt, record size and the
// sender's public key.
func decrypt(body []byte, sub *subscriber) ([]byte, error) {
	if len(body) < 21 {
		return nil, errors.New("shorter than the header")
	}
	salt, rs, idlen := body[:16], binary.BigEndian.Uint32(body[16:20]), int(body[20])
	if len(body) < 21+idlen || idlen != 65 {
		return nil, fmt.Errorf("key id of %d bytes", idlen)
	}
	senderKey, ct := body[21:21+idlen], body[21+idlen:]
	if uint32(len(ct)) > rs {
		return nil, fmt.Errorf("%d bytes of ciphertext in a record of %d: more than one record", len(ct), rs)
	}
	as, err := ecdh.P256().NewPublicKey(senderKey)
	if err != nil {
		return nil, fmt.Errorf("sender key: %w", err)
	}
	shared, err := sub.key.ECDH(as)
	if err != nil {
		return nil, err
	}
	prkKey, err := hkdf.Extract(sha256.New, shared, sub.auth)
	if err != nil {
		return nil, err
	}
	info := "WebPush: info\x00" + string(sub.key.PublicKey().Bytes()) + string(senderKey)
	ikm, err := hkdf.Expand(sha256.New, prkKey, info, 32)
	if err != nil {
		return nil, err
	}
	prk, err := hkdf.Extract(sha256.New, ikm, salt)
	if err != nil {
		return nil, err
	}
	cek, err := hkdf.Expand(sha256.New, prk, "Content-Encoding: aes128gcm\x00", 16)
	if err != nil {
		return nil, err
	}
	nonce, err := hkdf.Expand(sha256.New, prk, "Content-Encoding: nonce\x00", 12)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(cek)
	if err != nil {
		return nil, err
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	plain, err := gcm.Open(nil, nonce, ct, nil)
	if err != nil {
		return nil, err
	}
	// Padding: zeros after a delimiter, 2 for the last record.
	end := len(plain) - 1
	for end >= 0 && plain[end] == 0 {
		end--
	}
	if end < 0 || plain[end] != 2 {
		return nil, errors.New("no last-record delimiter")
	}
	return plain[:end], nil
}
