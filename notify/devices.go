package notify

import (
	"crypto/ecdh"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/majorhq/major/internal/atomicfile"
)

// The kinds of device.
const (
	KindWebPush = "webpush"
	KindNtfy    = "ntfy"
	KindFCM     = "fcm"
)

// ErrNoDevice is a device id the person does not have.
var ErrNoDevice = errors.New("no such device")

// maxDevices bounds the devices of one person.
const maxDevices = 20

// Subscription is a browser's push subscription (PushSubscription.toJSON).
type Subscription struct {
	Endpoint string `json:"endpoint"`
	Keys     struct {
		P256dh string `json:"p256dh"`
		Auth   string `json:"auth"`
	} `json:"keys"`
}

// NewDevice is a device as a person registers it: kind webpush with
// Subscription, ntfy with URL (the topic's URL) and Token (an access
// token, optional), fcm with Token (the app's registration token).
type NewDevice struct {
	Kind         string        `json:"kind"`
	Name         string        `json:"name"`
	Subscription *Subscription `json:"subscription"`
	URL          string        `json:"url"`
	Token        string        `json:"token"`
}

// Device is a registered device with its secrets, as kept in the state
// file; DeviceInfo is what its person is shown of it.
type Device struct {
	ID      string    `json:"id"`
	Person  string    `json:"person"`
	Kind    string    `json:"kind"`
	Name    string    `json:"name,omitempty"`
	Created time.Time `json:"created"`
	// URL is the Web Push endpoint or the ntfy topic's URL.
	URL string `json:"url,omitempty"`
	// P256dh and Auth are the Web Push subscription's keys.
	P256dh string `json:"p256dh,omitempty"`
	Auth   string `json:"auth,omitempty"`
	// Token is the ntfy access token or the FCM registration token.
	Token string `json:"token,omitempty"`
}

// DeviceInfo is a device without its secrets: its kind, name and the host
// it is reached through.
type DeviceInfo struct {
	ID      string    `json:"id"`
	Kind    string    `json:"kind"`
	Name    string    `json:"name,omitempty"`
	Host    string    `json:"host,omitempty"`
	Created time.Time `json:"created"`
}

// Info is d as its person sees it.
func (d Device) Info() DeviceInfo {
	info := DeviceInfo{ID: d.ID, Kind: d.Kind, Name: d.Name, Created: d.Created}
	if i := strings.Index(d.URL, "://"); i >= 0 {
		info.Host, _, _ = strings.Cut(d.URL[i+3:], "/")
	}
	if d.Kind == KindFCM {
		info.Host = "Firebase Cloud Messaging"
	}
	return info
}

var (
	ntfyTopic = regexp.MustCompile(`^[-_A-Za-z0-9]{1,64}$`)
	printable = regexp.MustCompile(`^[\x21-\x7e]+$`)
)

// device checks a registration and makes the device it describes.
// kinds are the kinds the server sends to.
func (n NewDevice) device(person string, rule hostRule, kinds []string, now time.Time) (Device, error) {
	if !slices.Contains(kinds, n.Kind) {
		switch n.Kind {
		case KindWebPush, KindNtfy, KindFCM:
			return Device{}, fmt.Errorf("%w: this server does not send %s notifications", ErrBadDevice, n.Kind)
		}
		return Device{}, fmt.Errorf("%w: kind must be webpush, ntfy or fcm", ErrBadDevice)
	}
	if len(n.Name) > 100 || strings.ContainsAny(n.Name, "\x00\n\r") {
		return Device{}, fmt.Errorf("%w: name is one line of at most 100 bytes", ErrBadDevice)
	}
	d := Device{ID: uuid.NewString(), Person: person, Kind: n.Kind, Name: strings.TrimSpace(n.Name), Created: now.UTC()}
	switch n.Kind {
	case KindWebPush:
		s := n.Subscription
		if s == nil {
			return Device{}, fmt.Errorf("%w: a webpush device needs its subscription", ErrBadDevice)
		}
		if _, err := rule.check(s.Endpoint); err != nil {
			return Device{}, err
		}
		if err := checkPushKeys(s.Keys.P256dh, s.Keys.Auth); err != nil {
			return Device{}, err
		}
		d.URL, d.P256dh, d.Auth = s.Endpoint, s.Keys.P256dh, s.Keys.Auth
	case KindNtfy:
		u, err := rule.check(n.URL)
		if err != nil {
			return Device{}, err
		}
		if _, topic := ntfyTarget(u.String()); !ntfyTopic.MatchString(topic) || u.RawQuery != "" {
			return Device{}, fmt.Errorf("%w: an ntfy URL is the topic's, such as https://ntfy.sh/my-topic", ErrBadDevice)
		}
		if n.Token != "" && (len(n.Token) > 4096 || !printable.MatchString(n.Token)) {
			return Device{}, fmt.Errorf("%w: the ntfy token is printable ASCII without spaces", ErrBadDevice)
		}
		d.URL, d.Token = u.String(), n.Token
	case KindFCM:
		if len(n.Token) > 4096 || !printable.MatchString(n.Token) {
			return Device{}, fmt.Errorf("%w: an fcm device needs its registration token", ErrBadDevice)
		}
		d.Token = n.Token
	}
	return d, nil
}

// checkPushKeys checks a subscription's keys: p256dh a point on P-256,
// auth 16 bytes, both base64url.
func checkPushKeys(p256dh, auth string) error {
	pub, err1 := decodeKey(p256dh)
	sec, err2 := decodeKey(auth)
	if err1 != nil || err2 != nil {
		return fmt.Errorf("%w: the subscription's keys are not base64url", ErrBadDevice)
	}
	if _, err := ecdh.P256().NewPublicKey(pub); err != nil {
		return fmt.Errorf("%w: keys.p256dh is not a P-256 public key", ErrBadDevice)
	}
	if len(sec) != 16 {
		return fmt.Errorf("%w: keys.auth is not 16 bytes", ErrBadDevice)
	}
	return nil
}

// decodeKey decodes base64url with or without padding.
func decodeKey(s string) ([]byte, error) {
	return base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
}

// devices keeps each person's devices in a state file of their folder
// (mode 0600: it holds their secrets), written whole on each change.
type devices struct {
	// path is a person's file; nil keeps devices in memory only.
	path     func(person string) string
	mu       sync.Mutex
	byPerson map[string][]Device
}

// openDevices reads the devices of persons.
func openDevices(path func(string) string, persons []string) (*devices, error) {
	d := &devices{path: path, byPerson: map[string][]Device{}}
	for _, p := range persons {
		if err := d.reload(p); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// reload reads person's devices from their file again: none when it is
// missing.
func (s *devices) reload(person string) error {
	if s.path == nil {
		return nil
	}
	path := s.path(person)
	var list []Device
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return fmt.Errorf("read devices: %w", err)
	default:
		if err := json.Unmarshal(data, &list); err != nil {
			return fmt.Errorf("devices file %s: %w", path, err)
		}
	}
	// A file of the person's folder names its person: an entry that
	// names another is not theirs.
	list = slices.DeleteFunc(list, func(d Device) bool { return d.Person != person })
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(list) == 0 {
		delete(s.byPerson, person)
	} else {
		s.byPerson[person] = list
	}
	return nil
}

// add registers d, unless its person has as many as one may or has it
// already (the same URL or token): then the one kept is returned.
func (s *devices) add(d Device) (Device, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	list := s.byPerson[d.Person]
	for i, old := range list {
		if old.Kind == d.Kind && old.URL == d.URL && (d.Kind != KindFCM || old.Token == d.Token) {
			// The same device again (a browser subscribes again at each
			// visit): its keys and name may be new.
			d.ID, d.Created = old.ID, old.Created
			list[i] = d
			return d, s.saveLocked(d.Person)
		}
	}
	if len(list) >= maxDevices {
		return Device{}, fmt.Errorf("%w: you have %d devices, the most one person may; remove one first", ErrBadDevice, len(list))
	}
	s.byPerson[d.Person] = append(list, d)
	return d, s.saveLocked(d.Person)
}

// of is person's devices.
func (s *devices) of(person string) []Device {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.byPerson[person])
}

// remove forgets person's device id; ErrNoDevice if they have none such.
func (s *devices) remove(person, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	list := s.byPerson[person]
	i := slices.IndexFunc(list, func(d Device) bool { return d.ID == id })
	if i < 0 {
		return ErrNoDevice
	}
	s.byPerson[person] = slices.Delete(list, i, i+1)
	return s.saveLocked(person)
}

func (s *devices) saveLocked(person string) error {
	if s.path == nil {
		return nil
	}
	list := s.byPerson[person]
	if list == nil {
		list = []Device{}
	}
	data, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		return err
	}
	return writeFile(s.path(person), data)
}

// writeFile replaces path with data atomically, mode 0600, its folder
// made 0700 if missing.
func writeFile(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	if err := atomicfile.Write(path, data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
