package notify

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/clientevent"
	"github.com/majorhq/major/personstate"
	"github.com/majorhq/major/relay"
)

// Defaults of Config.
const (
	DefaultNotifyAfter = 20 * time.Second
	DefaultSendTimeout = 10 * time.Second
	// DefaultContact is the VAPID subject when the owner names none.
	DefaultContact = "mailto:major@localhost"
)

// Clock is time as the Service sees it; tests set it by hand.
type Clock interface {
	Now() time.Time
	// AfterFunc runs f in its own goroutine after d, unless stopped.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc.
type Timer interface{ Stop() bool }

type realClock struct{}

func (realClock) Now() time.Time                            { return time.Now() }
func (realClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// FCMConfig turns on FCM: the service account, where its messages go
// (DefaultFCMEndpoint unless overridden, for tests), and the content
// they carry (ContentSummary unless ContentFull).
type FCMConfig struct {
	Credentials FCMCredentials
	Endpoint    string
	Content     string
}

// Config configures a Service.
type Config struct {
	// StateDir is the server's state directory: notify/vapid.json there
	// holds the VAPID key pair, and each person's folder (personstate)
	// their devices and their own settings, each file mode 0600; ""
	// keeps devices and settings in memory (tests) and needs VAPID.
	StateDir string
	// VAPID is the key pair when StateDir is empty.
	VAPID VAPIDKeys
	// PublicURL is the server's address as devices reach it
	// (scheme://host[:port]): the action URLs start with it. Empty makes
	// them relative, which only the web client can use.
	PublicURL string
	// NotifyAfter is how long a request waits with nobody watching
	// before it is notified; default DefaultNotifyAfter.
	NotifyAfter time.Duration
	// ActionTimeout is the most an action token lives (--ask-timeout);
	// default relay.DefaultAskTimeout.
	ActionTimeout time.Duration
	// AllowHosts are hosts a device URL may name besides public https
	// ones: "host" or "host:port", plain http allowed (tests, a
	// self-hosted ntfy on loopback).
	AllowHosts []string
	// Contact is the VAPID subject push services may write to (an e-mail
	// address or an https URL); default DefaultContact.
	Contact string
	// NtfyContent is ContentSummary (default) or ContentFull.
	NtfyContent string
	// FCM, when set, sends to the Android app's devices.
	FCM *FCMConfig
	// Configured is the owner's notification settings for person from
	// the configuration directory (nil: none); what the person chose
	// themselves (SetPreferences) wins.
	Configured func(person string) *Preferences
	// SendTimeout bounds each send; default DefaultSendTimeout.
	SendTimeout time.Duration
	Clock       Clock
	Logger      zerolog.Logger
}

// sender delivers a payload to one device of its kind.
type sender interface {
	send(ctx context.Context, d Device, p Payload) error
}

type sessionKey struct{ person, session string }

// watch is one client watching a session: an events stream or a
// chat-stream; client names its page (for SetVisible), "" for a client
// that cannot say (it counts as visible).
type watch struct{ client string }

// page is one page of the web client, across the streams it opens.
type page struct {
	visible  bool
	watchers int
}

// waiting is a request the Service heard of and has not seen settled.
type waiting struct {
	w     relay.Waiting
	timer Timer // counting NotifyAfter while nobody watches
	// armed numbers the counts, so a timer stopped too late to keep it
	// from firing is told from the one counting now.
	armed int
	sent  bool
}

// delivery is one notification decided for a person.
type delivery struct {
	person  string
	payload Payload
}

// job is one payload for one device.
type job struct {
	device  Device
	payload Payload
}

// Service decides who is notified of what, on which devices, and redeems
// the actions of its notifications. It implements relay.Notifier.
type Service struct {
	cfg     Config
	log     zerolog.Logger
	vapid   VAPIDKeys
	rule    hostRule
	devices *devices
	choices *choices
	tokens  *tokens
	senders map[string]sender
	kinds   []string
	clients []*http.Client

	// out are the notifications decided, for the dispatcher (which may
	// read the owner's configuration, so never under a caller's lock);
	// jobs are the sends, for the workers.
	out    chan delivery
	jobs   chan job
	ctx    context.Context
	cancel context.CancelFunc
	// dispatching is the dispatcher, wg the workers; queued counts the
	// notifications and sends not done yet (tests wait for them).
	dispatching sync.WaitGroup
	wg          sync.WaitGroup
	queued      sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	pages   map[sessionKey]*page // by person and page id
	watches map[sessionKey][]*watch
	pending map[string]*waiting // by session and request (requestKey)
	// refusedTurn marks the sessions whose running turn was notified as
	// refused: its budget or rate-limit error is the same news.
	refusedTurn map[sessionKey]bool
	// seen are the refusals notified, so each is told once.
	seen map[string]time.Time
	// held are the notifications quiet hours hold, per person, until
	// holdTimer releases them.
	held      map[string][]Payload
	holdTimer map[string]Timer
}

var _ relay.Notifier = (*Service)(nil)

// queueSize bounds the sends waiting for a worker; a notification beyond
// is dropped (and logged), never waited for.
const queueSize = 256

// workers is how many sends run at once.
const workers = 4

// New opens the Service's state (making the VAPID key pair on first
// start) and starts its senders; Close stops them.
func New(cfg Config) (*Service, error) {
	if cfg.NotifyAfter <= 0 {
		cfg.NotifyAfter = DefaultNotifyAfter
	}
	if cfg.ActionTimeout <= 0 {
		cfg.ActionTimeout = relay.DefaultAskTimeout
	}
	if cfg.SendTimeout <= 0 {
		cfg.SendTimeout = DefaultSendTimeout
	}
	if cfg.Contact == "" {
		cfg.Contact = DefaultContact
	}
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	cfg.PublicURL = strings.TrimRight(cfg.PublicURL, "/")
	for _, c := range []string{cfg.NtfyContent, fcmContent(cfg.FCM)} {
		if c != "" && c != ContentSummary && c != ContentFull {
			return nil, fmt.Errorf("notification content %q: must be %s or %s", c, ContentSummary, ContentFull)
		}
	}
	s := &Service{cfg: cfg, log: cfg.Logger.With().Str("part", "notify").Logger(), rule: hostRule{allow: cfg.AllowHosts},
		out: make(chan delivery, queueSize), jobs: make(chan job, queueSize), pages: map[sessionKey]*page{}, watches: map[sessionKey][]*watch{},
		pending: map[string]*waiting{}, refusedTurn: map[sessionKey]bool{}, seen: map[string]time.Time{},
		held: map[string][]Payload{}, holdTimer: map[string]Timer{}}
	var err error
	s.vapid = cfg.VAPID
	var devicesPath, choicesPath func(string) string
	var persons []string
	if dir := cfg.StateDir; dir != "" {
		if s.vapid, err = LoadVAPID(filepath.Join(dir, personstate.NotifyDir, "vapid.json")); err != nil {
			return nil, err
		}
		devicesPath = func(p string) string { return personstate.File(dir, p, personstate.NotifyDir, personstate.DevicesFile) }
		choicesPath = func(p string) string {
			return personstate.File(dir, p, personstate.NotifyDir, personstate.SettingsFile)
		}
		if persons, err = personstate.List(dir); err != nil {
			return nil, err
		}
	}
	if s.vapid.Public == "" || s.vapid.Private == "" {
		return nil, errors.New("notify: no VAPID key pair (give a StateDir or VAPID)")
	}
	if s.devices, err = openDevices(devicesPath, persons); err != nil {
		return nil, err
	}
	if s.choices, err = openChoices(choicesPath, persons); err != nil {
		return nil, err
	}
	if s.tokens, err = newTokens(); err != nil {
		return nil, err
	}
	devicesClient := sendClient(&s.rule, cfg.SendTimeout)
	s.clients = append(s.clients, devicesClient)
	click := ""
	if cfg.PublicURL != "" {
		click = cfg.PublicURL + "/app/#"
	}
	s.senders = map[string]sender{
		KindWebPush: &webPush{keys: s.vapid, contact: cfg.Contact, client: devicesClient},
		KindNtfy:    &ntfy{client: devicesClient, content: cfg.NtfyContent, click: click},
	}
	if f := cfg.FCM; f != nil {
		endpoint := f.Endpoint
		if endpoint == "" {
			endpoint = DefaultFCMEndpoint
		}
		// The owner names FCM's addresses, not a person: no host rule.
		fcmClient := sendClient(nil, cfg.SendTimeout)
		s.clients = append(s.clients, fcmClient)
		s.senders[KindFCM] = newFCM(f.Credentials, endpoint, f.Content, fcmClient)
	}
	for _, k := range []string{KindWebPush, KindNtfy, KindFCM} {
		if s.senders[k] != nil {
			s.kinds = append(s.kinds, k)
		}
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.dispatching.Go(s.dispatch)
	for range workers {
		s.wg.Go(s.work)
	}
	return s, nil
}

func fcmContent(f *FCMConfig) string {
	if f == nil {
		return ""
	}
	return f.Content
}

// Close stops the timers and the senders, after the sends under way; it
// is idempotent.
func (s *Service) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	for _, p := range s.pending {
		if p.timer != nil {
			p.timer.Stop()
		}
	}
	for _, t := range s.holdTimer {
		t.Stop()
	}
	close(s.out)
	s.mu.Unlock()
	// Sends under way end now: a shutdown is bounded.
	s.cancel()
	s.dispatching.Wait()
	close(s.jobs)
	s.wg.Wait()
	for _, c := range s.clients {
		c.CloseIdleConnections()
	}
}

// VAPIDPublicKey is the applicationServerKey browsers subscribe with.
func (s *Service) VAPIDPublicKey() string { return s.vapid.Public }

// ---- who is watching ----

// Watch counts a client watching person's session until end is called:
// an events stream, or a chat-stream while it follows its turn. pageID,
// when not empty, names the web page it belongs to, whose visibility
// SetVisible changes (visible is its visibility now); a client without
// a page always counts as watching.
func (s *Service) Watch(person, session, pageID string, visible bool) (end func()) {
	k := sessionKey{person, session}
	w := &watch{client: pageID}
	s.mu.Lock()
	if pageID != "" {
		pk := sessionKey{person, pageID}
		pg := s.pages[pk]
		if pg == nil {
			pg = &page{}
			s.pages[pk] = pg
		}
		pg.watchers++
		pg.visible = visible
	}
	s.watches[k] = append(s.watches[k], w)
	s.presenceChangedLocked(k)
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			ws := s.watches[k]
			if i := slices.Index(ws, w); i >= 0 {
				ws = slices.Delete(ws, i, i+1)
			}
			if len(ws) == 0 {
				delete(s.watches, k)
			} else {
				s.watches[k] = ws
			}
			if pageID != "" {
				pk := sessionKey{person, pageID}
				if pg := s.pages[pk]; pg != nil {
					if pg.watchers--; pg.watchers <= 0 {
						delete(s.pages, pk)
					}
				}
			}
			s.presenceChangedLocked(k)
		})
	}
}

// SetVisible records whether person's web page is visible; false if no
// stream of that page is attached (it reports again when it attaches).
func (s *Service) SetVisible(person, pageID string, visible bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	pg := s.pages[sessionKey{person, pageID}]
	if pg == nil {
		return false
	}
	pg.visible = visible
	for k, ws := range s.watches {
		if k.person == person && slices.ContainsFunc(ws, func(w *watch) bool { return w.client == pageID }) {
			s.presenceChangedLocked(k)
		}
	}
	return true
}

// watchingLocked reports whether a client of the person watches the
// session: attached, and its page (if it has one) visible.
func (s *Service) watchingLocked(k sessionKey) bool {
	for _, w := range s.watches[k] {
		if w.client == "" {
			return true
		}
		if pg := s.pages[sessionKey{k.person, w.client}]; pg != nil && pg.visible {
			return true
		}
	}
	return false
}

// presenceChangedLocked restarts the count of the session's waiting
// requests: stopped while someone watches, from zero once nobody does.
func (s *Service) presenceChangedLocked(k sessionKey) {
	watched := s.watchingLocked(k)
	for key, p := range s.pending {
		if p.sent || p.w.Person != k.person || p.w.SessionID != k.session {
			continue
		}
		switch {
		case watched && p.timer != nil:
			p.timer.Stop()
			p.timer = nil
		case !watched && p.timer == nil:
			s.armLocked(key, p)
		}
	}
}

func (s *Service) armLocked(key string, p *waiting) {
	if s.closed {
		return
	}
	p.armed++
	armed := p.armed
	p.timer = s.cfg.Clock.AfterFunc(s.cfg.NotifyAfter, func() { s.fire(key, p, armed) })
}

// ---- what the session core tells ----

// Waiting implements relay.Notifier: the request is notified once it has
// waited NotifyAfter with nobody watching its session.
func (s *Service) Waiting(w relay.Waiting) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	key := requestKey(w.SessionID, w.RequestID)
	if old := s.pending[key]; old != nil && old.timer != nil {
		old.timer.Stop()
	}
	p := &waiting{w: w}
	s.pending[key] = p
	if !s.watchingLocked(sessionKey{w.Person, w.SessionID}) {
		s.armLocked(key, p)
	}
}

// fire notifies a request that waited NotifyAfter unwatched, unless it
// was settled, notified or watched meanwhile.
func (s *Service) fire(key string, p *waiting, armed int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.pending[key] != p || p.sent || p.armed != armed || p.timer == nil {
		return
	}
	p.timer = nil
	if s.watchingLocked(sessionKey{p.w.Person, p.w.SessionID}) {
		return
	}
	p.sent = true
	body, choices := waitingContent(p.w)
	payload := Payload{Type: p.w.Kind, SessionID: p.w.SessionID, RequestID: p.w.RequestID, Title: title(p.w.Title), Body: body}
	now := s.cfg.Clock.Now()
	exp := now.Add(s.cfg.ActionTimeout)
	if !p.w.Expires.IsZero() && p.w.Expires.Before(exp) {
		exp = p.w.Expires
	}
	for i, c := range choices {
		claim := Claim{Person: p.w.Person, SessionID: p.w.SessionID, RequestID: p.w.RequestID, Decision: c.decision}
		tok, err := s.tokens.issue(claim, i, now, exp)
		if err != nil {
			s.log.Error().Err(err).Msg("issue an action token")
			payload.Actions = nil
			break
		}
		payload.Actions = append(payload.Actions, Action{Label: c.label, URL: actionURL(s.cfg.PublicURL, tok, p.w.Person)})
	}
	s.deliverLocked(p.w.Person, payload)
}

// Settled implements relay.Notifier: a request that no longer waits is
// not notified, and its actions die.
func (s *Service) Settled(person, session, request string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, p := range s.pending {
		if p.w.Person == person && p.w.SessionID == session && (request == "" || p.w.RequestID == request) {
			if p.timer != nil {
				p.timer.Stop()
			}
			delete(s.pending, key)
		}
	}
	// Under s.mu: no action of it can be issued after this.
	s.tokens.revoke(session, request)
	if request == "" {
		delete(s.refusedTurn, sessionKey{person, session})
		kept := s.held[person][:0:0]
		for _, p := range s.held[person] {
			if p.SessionID != session {
				kept = append(kept, p)
			}
		}
		s.held[person] = kept
	}
}

// TurnEnded implements relay.Notifier: a turn's end that no client saw is
// notified (done or error), unless it was interrupted (someone chose to
// stop it), or a draft it made or a refusal already says what matters.
func (s *Service) TurnEnded(e relay.TurnEnded) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := sessionKey{e.Person, e.SessionID}
	refused := s.refusedTurn[k]
	delete(s.refusedTurn, k)
	switch {
	case s.closed, e.Outcome == "interrupted", s.watchingLocked(k):
		return
	case refused && (e.ErrorKind == clientevent.KindBudget || e.ErrorKind == clientevent.KindRateLimited):
		return
	}
	for _, p := range s.pending {
		if p.w.Kind == TypeDraft && p.w.Person == e.Person && p.w.SessionID == e.SessionID {
			return
		}
	}
	typ, body := endContent(e)
	s.deliverLocked(e.Person, Payload{Type: typ, SessionID: e.SessionID, Title: title(e.Title), Body: body})
}

// seenFor is how long a refusal notified is remembered.
const seenFor = 24 * time.Hour

// Refused implements relay.Notifier: each refusal is notified once (a
// rate-limit window once, however many messages it holds up), unless
// someone watches the session.
func (s *Service) Refused(r relay.Refusal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	now := s.cfg.Clock.Now()
	key := r.Kind + "\x00" + r.Person + "\x00" + r.SessionID + "\x00" + r.Message
	if r.Kind == clientevent.KindRateLimited && !r.Until.IsZero() {
		key = r.Kind + "\x00" + r.Person + "\x00" + r.Until.UTC().Format(time.RFC3339)
	}
	for k, at := range s.seen {
		if now.Sub(at) > seenFor {
			delete(s.seen, k)
		}
	}
	if _, ok := s.seen[key]; ok {
		return
	}
	s.seen[key] = now
	k := sessionKey{r.Person, r.SessionID}
	s.refusedTurn[k] = true
	if s.watchingLocked(k) {
		return
	}
	s.deliverLocked(r.Person, Payload{Type: TypeRefused, SessionID: r.SessionID, Title: title(r.Title), Body: r.Message})
}

// ---- delivery ----

// maxHeld bounds the notifications quiet hours hold for one person; one
// per chat is kept, its latest.
const maxHeld = 20

// deliverLocked hands p to the dispatcher, never waiting: a notification
// that finds the queue full is dropped (and logged).
func (s *Service) deliverLocked(person string, p Payload) {
	if s.closed {
		return
	}
	s.queued.Add(1)
	select {
	case s.out <- delivery{person: person, payload: p}:
	default:
		s.queued.Done()
		s.log.Warn().Str("person", person).Str("type", p.Type).Msg("notification dropped: too many waiting")
	}
}

func (s *Service) dispatch() {
	for d := range s.out {
		s.deliver(d.person, d.payload)
		s.queued.Done()
	}
}

// deliver sends p to the person's devices, if they want its type; quiet
// hours hold the types that need no answer until they end.
func (s *Service) deliver(person string, p Payload) {
	prefs := s.Preferences(person)
	if !prefs.wants(p.Type) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.cfg.Clock.Now()
	if end, quiet := prefs.QuietHours.until(now); quiet && !waits(p.Type) && p.Type != TypeTest {
		held := slices.DeleteFunc(s.held[person], func(h Payload) bool { return h.SessionID == p.SessionID })
		if len(held) >= maxHeld {
			held = held[1:]
		}
		s.held[person] = append(held, p)
		if s.holdTimer[person] == nil && !s.closed {
			s.holdTimer[person] = s.cfg.Clock.AfterFunc(end.Sub(now), func() { s.release(person) })
		}
		return
	}
	for _, d := range s.devices.of(person) {
		s.queued.Add(1)
		select {
		case s.jobs <- job{device: d, payload: p}:
		default:
			s.queued.Done()
			s.log.Warn().Str("person", person).Str("device", d.ID).Str("type", p.Type).Msg("notification dropped: too many sends waiting")
		}
	}
}

// release sends what quiet hours held, but what its person has seen
// meanwhile (they watch its chat).
func (s *Service) release(person string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.holdTimer, person)
	if s.closed {
		return
	}
	held := s.held[person]
	delete(s.held, person)
	for _, p := range held {
		if !s.watchingLocked(sessionKey{person, p.SessionID}) {
			s.deliverLocked(person, p)
		}
	}
}

func (s *Service) work() {
	for j := range s.jobs {
		if err := s.sendNow(j.device, j.payload); err != nil {
			s.log.Warn().Err(err).Str("person", j.device.Person).Str("device", j.device.ID).Str("kind", j.device.Kind).
				Str("type", j.payload.Type).Msg("notification not delivered")
		}
		s.queued.Done()
	}
}

// sendNow sends p to d within SendTimeout; a device its service says is
// gone is removed.
func (s *Service) sendNow(d Device, p Payload) error {
	snd := s.senders[d.Kind]
	if snd == nil {
		return fmt.Errorf("%w: this server does not send %s notifications", ErrBadDevice, d.Kind)
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.SendTimeout)
	defer cancel()
	err := snd.send(ctx, d, p)
	if errors.Is(err, errGone) {
		if rerr := s.devices.remove(d.Person, d.ID); rerr != nil && !errors.Is(rerr, ErrNoDevice) {
			return fmt.Errorf("remove a device that is gone: %w", rerr)
		}
		s.log.Info().Str("person", d.Person).Str("device", d.ID).Str("kind", d.Kind).Msg("device removed: its push service says it is gone")
		return err
	}
	if err == nil {
		s.log.Debug().Str("person", d.Person).Str("device", d.ID).Str("type", p.Type).Msg("notification sent")
	}
	return err
}

// ---- what a person manages ----

// AddDevice registers a device of person's; ErrBadDevice says what is
// wrong with it.
func (s *Service) AddDevice(person string, n NewDevice) (DeviceInfo, error) {
	d, err := n.device(person, s.rule, s.kinds, s.cfg.Clock.Now())
	if err != nil {
		return DeviceInfo{}, err
	}
	if d, err = s.devices.add(d); err != nil {
		return DeviceInfo{}, err
	}
	return d.Info(), nil
}

// Devices lists person's devices, without their secrets.
func (s *Service) Devices(person string) []DeviceInfo {
	out := []DeviceInfo{}
	for _, d := range s.devices.of(person) {
		out = append(out, d.Info())
	}
	return out
}

// RemoveDevice forgets one of person's devices; ErrNoDevice if they have
// none with that id.
func (s *Service) RemoveDevice(person, id string) error { return s.devices.remove(person, id) }

// Reload reads person's devices and settings from their folder again: a
// person taken in from another server has theirs, one who moved away
// none. What quiet hours held for them is dropped.
func (s *Service) Reload(person string) error {
	s.mu.Lock()
	delete(s.held, person)
	if t := s.holdTimer[person]; t != nil {
		t.Stop()
		delete(s.holdTimer, person)
	}
	s.mu.Unlock()
	return errors.Join(s.devices.reload(person), s.choices.reload(person))
}

// Preferences are person's settings in force: their own choice, else
// the owner's configuration, else every event and no quiet hours.
func (s *Service) Preferences(person string) Preferences {
	if p, ok := s.choices.get(person); ok {
		return p
	}
	if s.cfg.Configured != nil {
		if p := s.cfg.Configured(person); p != nil {
			return *p
		}
	}
	return Preferences{}
}

// SetPreferences keeps person's own choice; ErrBadSettings says what is
// wrong with it.
func (s *Service) SetPreferences(person string, p Preferences) error {
	if err := p.Check(); err != nil {
		return err
	}
	return s.choices.set(person, p)
}

// TestResult is how a test notification went on one device.
type TestResult struct {
	Device DeviceInfo `json:"device"`
	Error  string     `json:"error,omitempty"`
}

// Test sends a test notification to each of person's devices now and
// says how each went (quiet hours and chosen events do not apply).
func (s *Service) Test(person string) []TestResult {
	ds := s.devices.of(person)
	out := make([]TestResult, len(ds))
	var wg sync.WaitGroup
	for i, d := range ds {
		out[i].Device = d.Info()
		wg.Go(func() {
			p := Payload{Type: TypeTest, Title: "Major", Body: "Notifications reach this device."}
			if err := s.sendNow(d, p); err != nil {
				out[i].Error = err.Error()
			}
		})
	}
	wg.Wait()
	return out
}

// Redeem spends an action token and says what the person decided; the
// caller applies the decision through the session core. person, when
// not empty, is who presents it. ErrInvalidToken or ErrTokenGone.
func (s *Service) Redeem(token, person string) (Claim, error) {
	return s.tokens.redeem(token, person, s.cfg.Clock.Now())
}

// actionURL is the link a notification's button posts to. The token
// alone decides; the person in the query is for a proxy in front of
// several servers, which routes by person (deploy/haproxy.cfg) and has
// no other way to know whose link it is.
func actionURL(public, token, person string) string {
	return public + "/api/claude/actions/" + token + "?" + url.Values{"person": {person}}.Encode()
}
