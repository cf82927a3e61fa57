package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	webpush "github.com/SherClockHolmes/webpush-go"
)

// VAPIDKeys are the server's key pair for VAPID (RFC 8292), base64url
// without padding: the public key is the applicationServerKey a browser
// subscribes with, the private key signs each push.
type VAPIDKeys struct {
	Public  string `json:"public_key"`
	Private string `json:"private_key"`
}

// LoadVAPID reads the server's VAPID key pair from path, making it (mode
// 0600) on first start. A file that does not hold a pair is an error,
// never replaced: subscriptions made with its public key would stop
// working.
func LoadVAPID(path string) (VAPIDKeys, error) {
	var k VAPIDKeys
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if k.Private, k.Public, err = webpush.GenerateVAPIDKeys(); err != nil {
			return k, fmt.Errorf("make VAPID keys: %w", err)
		}
		data, _ = json.MarshalIndent(k, "", "  ")
		if err := writeFile(path, data); err != nil {
			return k, fmt.Errorf("keep VAPID keys: %w", err)
		}
		return k, nil
	case err != nil:
		return k, fmt.Errorf("read VAPID keys: %w", err)
	}
	if err := json.Unmarshal(data, &k); err != nil || k.Public == "" || k.Private == "" {
		return k, fmt.Errorf("VAPID key file %s does not hold a key pair; move it away to make a new one (browsers then subscribe again)", path)
	}
	// Written by an earlier version or by hand: it holds a private key.
	if st, err := os.Stat(path); err == nil && st.Mode().Perm() != 0o600 {
		if err := os.Chmod(path, 0o600); err != nil {
			return k, fmt.Errorf("VAPID key file %s: %w", filepath.Base(path), err)
		}
	}
	return k, nil
}

// webPushLimit is the most a Web Push payload may be: the library pads
// every message to one 4096-byte record, of which the encryption's header
// and tag and the padding delimiter take 103.
const webPushLimit = 4096 - 103

// webPush sends to browsers through their push services: the payload
// encrypted for the subscription (RFC 8291), signed with the server's
// VAPID key (RFC 8292), by github.com/SherClockHolmes/webpush-go.
type webPush struct {
	keys    VAPIDKeys
	contact string
	client  *http.Client
}

func (w *webPush) send(ctx context.Context, d Device, p Payload) error {
	p.fit(webPushLimit)
	body, err := json.Marshal(p)
	if err != nil {
		return err
	}
	sub := &webpush.Subscription{Endpoint: d.URL, Keys: webpush.Keys{P256dh: d.P256dh, Auth: d.Auth}}
	urgency := webpush.UrgencyNormal
	if waits(p.Type) {
		urgency = webpush.UrgencyHigh
	}
	resp, err := webpush.SendNotificationWithContext(ctx, body, sub, &webpush.Options{
		HTTPClient: w.client,
		// The library writes the mailto: itself.
		Subscriber:      strings.TrimPrefix(w.contact, "mailto:"),
		VAPIDPublicKey:  w.keys.Public,
		VAPIDPrivateKey: w.keys.Private,
		TTL:             24 * 3600,
		Urgency:         urgency,
	})
	if err != nil {
		return fmt.Errorf("web push: %w", err)
	}
	text := drain(resp)
	switch {
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone:
		return errGone
	case resp.StatusCode/100 != 2:
		return fmt.Errorf("web push: %w", &statusError{resp.StatusCode, text})
	}
	return nil
}
