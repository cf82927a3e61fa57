package notify_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/majorhq/major/internal/leakcheck"
	"github.com/majorhq/major/notify"
	"github.com/majorhq/major/notify/notifytest"
)

func TestMain(m *testing.M) {
	leakcheck.Main(m,
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}

// clock is a notify.Clock moved by hand: its timers run, in order, on
// the goroutine that moves it past them.
type clock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*timer
}

type timer struct {
	c       *clock
	at      time.Time
	f       func()
	stopped bool
}

func (t *timer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.stopped
	t.stopped = true
	return was
}

func newClock(now time.Time) *clock { return &clock{now: now} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) AfterFunc(d time.Duration, f func()) notify.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &timer{c: c, at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

// Advance moves the clock by d, running the timers due on the way.
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		slices.SortStableFunc(c.timers, func(a, b *timer) int { return a.at.Compare(b.at) })
		var next *timer
		for i, t := range c.timers {
			if !t.stopped && !t.at.After(end) {
				next = t
				c.timers = slices.Delete(c.timers, i, i+1)
				break
			}
		}
		if next == nil {
			c.now = end
			c.mu.Unlock()
			return
		}
		c.now = next.at
		next.stopped = true
		c.mu.Unlock()
		next.f()
	}
}

const notifyAfter = 20 * time.Second

// world is a Service on a hand-moved clock with a push service, an ntfy
// server and FCM, and sebastian's browser subscribed.
type world struct {
	s     *notify.Service
	clock *clock
	push  *notifytest.PushService
	ntfy  *notifytest.Ntfy
	fcm   *notifytest.FCM
	sub   notify.Subscription
}

func newWorld(tb testing.TB, edit func(*notify.Config)) *world {
	tb.Helper()
	w := &world{clock: newClock(time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)), push: notifytest.NewPushService(tb),
		ntfy: notifytest.NewNtfy(tb, "tk_secret"), fcm: notifytest.NewFCM(tb, "major-notes")}
	cfg := notify.Config{StateDir: tb.TempDir(), PublicURL: "https://major.example", NotifyAfter: notifyAfter,
		ActionTimeout: 10 * time.Minute, AllowHosts: []string{"127.0.0.1"}, Clock: w.clock,
		FCM:    &notify.FCMConfig{Credentials: w.fcm.Credentials, Endpoint: w.fcm.URL},
		Logger: zerolog.New(zerolog.NewTestWriter(tb)).Level(zerolog.WarnLevel)}
	if edit != nil {
		edit(&cfg)
	}
	s, err := notify.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	w.s = s
	w.push.Expect(s.VAPIDPublicKey())
	w.sub = w.push.Subscribe(tb)
	if !slices.Contains(cfg.AllowHosts, "127.0.0.1") {
		return w // the push service's host is not allowed
	}
	if _, err := s.AddDevice("sebastian", notify.NewDevice{Kind: notify.KindWebPush, Name: "Laptop", Subscription: &w.sub}); err != nil {
		tb.Fatal(err)
	}
	return w
}

// pushes is what reached the push service once everything decided so far
// was sent.
func (w *world) pushes(tb testing.TB) []notify.Payload {
	tb.Helper()
	w.s.Flush()
	var out []notify.Payload
	for _, p := range w.push.Pushes() {
		out = append(out, p.Notification(tb))
	}
	return out
}
