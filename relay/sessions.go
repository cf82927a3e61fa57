package relay

import (
	"errors"
	"sort"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/majorhq/major/supervisor"
)

// ErrNotFound is returned for a session that does not exist or belongs to
// another person; the two are not told apart, so ids leak nothing.
var ErrNotFound = errors.New("session not found")

// ChatMessage is one entry of a session's history.
type ChatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// SessionInfo describes a session in the sessions list.
type SessionInfo struct {
	ID           string    `json:"id"`
	Title        string    `json:"title"`
	Created      time.Time `json:"created"`
	LastActivity time.Time `json:"last_activity"`
	State        string    `json:"state"`
}

// SessionParams is what a Launcher needs to start a supervisor session.
type SessionParams struct {
	ID           string
	Person       string
	CLISessionID string
	Sink         supervisor.Sink
	// Chat is the relay side of the session, for questions and
	// permissions that wait for a client.
	Chat *Chat
}

// Launcher builds the supervisor session of a chat: the CLI spec for the
// person, the control handlers. cmd/major provides it.
type Launcher interface {
	Launch(p SessionParams) *supervisor.Session
}

// LauncherFunc adapts a function to Launcher.
type LauncherFunc func(SessionParams) *supervisor.Session

// Launch calls f.
func (f LauncherFunc) Launch(p SessionParams) *supervisor.Session { return f(p) }

// Sessions holds every chat session by id.
type Sessions struct {
	launcher Launcher
	log      zerolog.Logger
	now      func() time.Time

	mu   sync.Mutex
	byID map[string]*Chat
}

// NewSessions returns an empty registry.
func NewSessions(l Launcher, log zerolog.Logger) *Sessions {
	return &Sessions{launcher: l, log: log, now: time.Now, byID: make(map[string]*Chat)}
}

// Chat is one chat session as the relay sees it: the supervisor session,
// its event stream, its history and title.
type Chat struct {
	ID      string
	Person  string
	Created time.Time

	sess   *supervisor.Session
	stream *Stream

	mu           sync.Mutex
	tr           *translator
	title        string
	history      []ChatMessage
	lastActivity time.Time
	interactive  int
	asks         *asks
}

// Session is the supervisor session.
func (c *Chat) Session() *supervisor.Session { return c.sess }

// Stream is the session's event log.
func (c *Chat) Stream() *Stream { return c.stream }

// Publish implements supervisor.Sink: it translates the event, appends the
// results to the stream and keeps the history, all in one order.
func (c *Chat) Publish(ev supervisor.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ev.Kind == supervisor.EventTurnStart {
		c.history = append(c.history, ChatMessage{Role: "user", Content: ev.Text})
		if c.title == "" {
			c.title = oneLine(ev.Text, 80)
		}
	}
	for _, o := range c.tr.translate(ev) {
		c.stream.publishJSON(o.body, o.beginTurn, o.terminal)
	}
	if ev.Kind == supervisor.EventTurnStart || ev.Kind == supervisor.EventTurnEnd {
		c.lastActivity = ev.Time
	}
	if ev.Kind == supervisor.EventTurnEnd {
		if text := c.tr.text.String(); text != "" {
			c.history = append(c.history, ChatMessage{Role: "assistant", Content: text})
		}
		if c.asks != nil {
			c.asks.cancelAll(c)
		}
	}
}

// History returns a copy of the session's messages.
func (c *Chat) History() []ChatMessage {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]ChatMessage{}, c.history...)
}

// Info describes the session for the sessions list.
func (c *Chat) Info() SessionInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	return SessionInfo{ID: c.ID, Title: c.title, Created: c.Created, LastActivity: c.lastActivity, State: string(c.sess.State())}
}

// AttachInteractive counts a client that can answer questions until the
// returned func is called.
func (c *Chat) AttachInteractive() (detach func()) {
	c.mu.Lock()
	c.interactive++
	c.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			c.interactive--
			c.mu.Unlock()
		})
	}
}

// Interactive reports whether a client that can answer is attached.
func (c *Chat) Interactive() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.interactive > 0
}

// GetOrCreate returns the person's session with id, or a new session when
// id is empty, unknown or another person's: a person never continues
// someone else's session.
func (s *Sessions) GetOrCreate(id, person string) *Chat {
	if c, err := s.Get(id, person); err == nil {
		return c
	}
	return s.create(person)
}

func (s *Sessions) create(person string) *Chat {
	id := uuid.NewString()
	now := s.now()
	c := &Chat{
		ID: id, Person: person, Created: now,
		stream:       NewStream(nil),
		tr:           newTranslator(id),
		lastActivity: now,
	}
	c.asks = newAsks()
	c.sess = s.launcher.Launch(SessionParams{ID: id, Person: person, Sink: c, Chat: c})
	s.mu.Lock()
	s.byID[id] = c
	s.mu.Unlock()
	s.log.Info().Str("session", id).Str("person", person).Msg("session created")
	return c
}

// Get returns the person's session with id; ErrNotFound otherwise.
func (s *Sessions) Get(id, person string) (*Chat, error) {
	if id == "" {
		return nil, ErrNotFound
	}
	s.mu.Lock()
	c, ok := s.byID[id]
	s.mu.Unlock()
	if !ok || c.Person != person {
		return nil, ErrNotFound
	}
	return c, nil
}

// List returns the person's sessions, most recently active first.
func (s *Sessions) List(person string) []SessionInfo {
	s.mu.Lock()
	var chats []*Chat
	for _, c := range s.byID {
		if c.Person == person {
			chats = append(chats, c)
		}
	}
	s.mu.Unlock()
	out := make([]SessionInfo, 0, len(chats))
	for _, c := range chats {
		out = append(out, c.Info())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].LastActivity.After(out[j].LastActivity) })
	return out
}

// Clear ends the person's session and forgets it; false if there was none.
func (s *Sessions) Clear(id, person string) bool {
	s.mu.Lock()
	c, ok := s.byID[id]
	if ok && c.Person == person {
		delete(s.byID, id)
	}
	s.mu.Unlock()
	if !ok || c.Person != person {
		return false
	}
	if err := c.sess.Close(); err != nil {
		s.log.Warn().Err(err).Str("session", id).Msg("close session")
	}
	c.stream.Close()
	return true
}

// Close ends every session.
func (s *Sessions) Close() {
	s.mu.Lock()
	chats := make([]*Chat, 0, len(s.byID))
	for _, c := range s.byID {
		chats = append(chats, c)
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range chats {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.sess.Close()
			c.stream.Close()
		}()
	}
	wg.Wait()
}
