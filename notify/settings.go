package notify

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"
)

// ErrBadSettings is a notification setting that does not parse.
var ErrBadSettings = errors.New("bad notification settings")

// Preferences are a person's notification settings: which events they
// are told of, and their quiet hours. The JSON form is the one of the
// configuration directory's notifications key and of the settings
// endpoint.
type Preferences struct {
	// Events are the types to notify of (Types); nil is all of them.
	Events []string `json:"events"`
	// QuietHours, when set, hold the notifications that need no answer
	// (done, error, refused) until they end.
	QuietHours *QuietHours `json:"quiet_hours"`
}

// QuietHours is a span of the day, in a time zone: From until To (local
// "HH:MM"); a span that wraps midnight (22:00 to 07:00) is the night.
type QuietHours struct {
	From string `json:"from"`
	To   string `json:"to"`
	// TZ is an IANA time zone (Europe/Berlin); empty is UTC.
	TZ string `json:"tz"`
}

// Check reports what is wrong with p, or nil.
func (p Preferences) Check() error {
	for _, e := range p.Events {
		if !slices.Contains(Types, e) {
			return fmt.Errorf("%w: events: %q is not one of %v", ErrBadSettings, e, Types)
		}
	}
	if q := p.QuietHours; q != nil {
		if _, _, _, err := q.parse(); err != nil {
			return err
		}
	}
	return nil
}

// wants reports whether the person is told of typ.
func (p Preferences) wants(typ string) bool {
	return p.Events == nil || typ == TypeTest || slices.Contains(p.Events, typ)
}

// clock parses "HH:MM" into minutes of the day.
func clock(s string) (int, error) {
	t, err := time.Parse("15:04", s)
	if err != nil {
		return 0, fmt.Errorf("%w: quiet_hours: %q is not a time of day as HH:MM", ErrBadSettings, s)
	}
	return t.Hour()*60 + t.Minute(), nil
}

func (q QuietHours) parse() (from, to int, loc *time.Location, err error) {
	if from, err = clock(q.From); err != nil {
		return 0, 0, nil, err
	}
	if to, err = clock(q.To); err != nil {
		return 0, 0, nil, err
	}
	if from == to {
		return 0, 0, nil, fmt.Errorf("%w: quiet_hours: from and to are the same time", ErrBadSettings)
	}
	loc = time.UTC
	if q.TZ != "" {
		if loc, err = time.LoadLocation(q.TZ); err != nil {
			return 0, 0, nil, fmt.Errorf("%w: quiet_hours: %q is not a time zone", ErrBadSettings, q.TZ)
		}
	}
	return from, to, loc, nil
}

// until reports whether now is within the quiet hours and, if so, when
// they end.
func (q *QuietHours) until(now time.Time) (time.Time, bool) {
	if q == nil {
		return time.Time{}, false
	}
	from, to, loc, err := q.parse()
	if err != nil {
		return time.Time{}, false
	}
	local := now.In(loc)
	m := local.Hour()*60 + local.Minute()
	quiet := (from < to && m >= from && m < to) || (from > to && (m >= from || m < to))
	if !quiet {
		return time.Time{}, false
	}
	end := time.Date(local.Year(), local.Month(), local.Day(), to/60, to%60, 0, 0, loc)
	if !end.After(now) {
		end = time.Date(local.Year(), local.Month(), local.Day()+1, to/60, to%60, 0, 0, loc)
	}
	return end, true
}

// choices keeps the settings each person chose themselves (the settings
// endpoint) in a state file of their folder; a person who chose none
// has the configured ones.
type choices struct {
	// path is a person's file; nil keeps the choices in memory only.
	path func(person string) string
	mu   sync.Mutex
	all  map[string]Preferences
}

// openChoices reads the choices of persons.
func openChoices(path func(string) string, persons []string) (*choices, error) {
	c := &choices{path: path, all: map[string]Preferences{}}
	for _, p := range persons {
		if err := c.reload(p); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// reload reads person's choice from their file again: none when it is
// missing.
func (c *choices) reload(person string) error {
	if c.path == nil {
		return nil
	}
	path := c.path(person)
	data, err := os.ReadFile(path)
	var p *Preferences
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return fmt.Errorf("read notification settings: %w", err)
	default:
		if err := json.Unmarshal(data, &p); err != nil {
			return fmt.Errorf("notification settings file %s: %w", path, err)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if p == nil {
		delete(c.all, person)
	} else {
		c.all[person] = *p
	}
	return nil
}

func (c *choices) get(person string) (Preferences, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.all[person]
	return p, ok
}

func (c *choices) set(person string, p Preferences) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.all[person] = p
	if c.path == nil {
		return nil
	}
	data, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	return writeFile(c.path(person), data)
}
