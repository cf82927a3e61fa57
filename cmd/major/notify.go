package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/rs/zerolog"

	sessionconfig "github.com/majorhq/major/config"
	"github.com/majorhq/major/notify"
)

// notifyFlags are the notifications' flags.
type notifyFlags struct {
	After          time.Duration
	PublicURL      string
	AllowHosts     []string
	Contact        string
	NtfyContent    string
	FCMCredentials string
	FCMEndpoint    string
	FCMContent     string
}

// parse checks the notifications' flags and takes the list of
// --push-allow-hosts.
func (n *notifyFlags) parse(allow string) error {
	if n.After <= 0 {
		return errors.New("--notify-after (MAJOR_NOTIFY_AFTER) must be positive")
	}
	if n.PublicURL != "" {
		u, err := url.Parse(n.PublicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			return fmt.Errorf("--public-url (MAJOR_PUBLIC_URL) %q: write scheme://host[:port], e.g. https://major.example.com", n.PublicURL)
		}
		n.PublicURL = strings.TrimRight(n.PublicURL, "/")
	}
	for _, h := range strings.Split(allow, ",") {
		if h = strings.TrimSpace(h); h == "" {
			continue
		}
		host := h
		if hh, port, err := net.SplitHostPort(h); err == nil && port != "" {
			host = hh
		}
		if host == "" || strings.ContainsAny(h, "/@?#* ") {
			return fmt.Errorf("--push-allow-hosts (MAJOR_PUSH_ALLOW_HOSTS): %q is not a host or host:port", h)
		}
		n.AllowHosts = append(n.AllowHosts, h)
	}
	switch {
	case strings.HasPrefix(n.Contact, "mailto:") || strings.HasPrefix(n.Contact, "https://"):
	case strings.Contains(n.Contact, "@") && !strings.Contains(n.Contact, ":"):
		n.Contact = "mailto:" + n.Contact
	default:
		return fmt.Errorf("--push-contact (MAJOR_PUSH_CONTACT) %q: give a mailto: address or an https URL", n.Contact)
	}
	for flag, v := range map[string]string{"--ntfy-content (MAJOR_NTFY_CONTENT)": n.NtfyContent, "--fcm-content (MAJOR_FCM_CONTENT)": n.FCMContent} {
		if v != notify.ContentSummary && v != notify.ContentFull {
			return fmt.Errorf("%s is summary or full, not %q", flag, v)
		}
	}
	if u, err := url.Parse(n.FCMEndpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--fcm-endpoint (MAJOR_FCM_ENDPOINT) %q is not a URL", n.FCMEndpoint)
	}
	return nil
}

// notificationsRule checks the notifications key of the session
// configuration: notify's settings, nothing else in them.
func notificationsRule(raw []byte) error {
	_, err := preferences(raw)
	return err
}

func preferences(raw []byte) (notify.Preferences, error) {
	var p notify.Preferences
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return p, fmt.Errorf("not {\"events\": [...], \"quiet_hours\": {\"from\", \"to\", \"tz\"}}: %w", err)
	}
	return p, p.Check()
}

// startNotify opens the notifications' state (the VAPID key pair in
// state-dir/notify, made on first start; each person's devices and
// settings in their folder) and starts their senders; the
// owner's settings for each person come from the session configuration.
// Action tokens live as long as a question may wait.
func startNotify(n notifyFlags, stateDir string, askTimeout time.Duration, publicURL string, settings *sessionconfig.Store, log zerolog.Logger) (*notify.Service, error) {
	cfg := notify.Config{StateDir: stateDir, PublicURL: publicURL, NotifyAfter: n.After,
		ActionTimeout: askTimeout, AllowHosts: n.AllowHosts, Contact: n.Contact, NtfyContent: n.NtfyContent, Logger: log,
		Configured: func(person string) *notify.Preferences {
			raw := settings.Notifications(person)
			if len(raw) == 0 {
				return nil
			}
			// Checked when the file was read.
			p, _ := preferences(raw)
			return &p
		}}
	if n.FCMCredentials != "" {
		creds, err := notify.LoadFCMCredentials(n.FCMCredentials)
		if err != nil {
			return nil, fmt.Errorf("--fcm-credentials: %w", err)
		}
		cfg.FCM = &notify.FCMConfig{Credentials: creds, Endpoint: n.FCMEndpoint, Content: n.FCMContent}
	}
	s, err := notify.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("notifications: %w", err)
	}
	return s, nil
}
