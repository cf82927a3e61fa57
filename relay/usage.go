package relay

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/internal/atomicfile"
	"github.com/majorhq/major/supervisor"
)

// Limits bound what a person's turns may cost; a zero field is no limit.
type Limits struct {
	// SessionUSD bounds what one chat session spends in all.
	SessionUSD float64 `json:"session_usd,omitempty"`
	// PersonDayUSD bounds what all of one person's sessions spend in one
	// day (UTC).
	PersonDayUSD float64 `json:"person_day_usd,omitempty"`
	// MaxTurns bounds the agent turns (model requests with tool calls
	// between them) of one message.
	MaxTurns int `json:"max_turns,omitempty"`
}

// ErrOverBudget refuses a message when the session or the person has
// spent their budget; the message never reaches the model.
var ErrOverBudget = errors.New("over budget")

// BudgetError says which budget a refused message is over.
type BudgetError struct {
	// Scope is "session" or "day".
	Scope    string
	LimitUSD float64
	SpentUSD float64
}

func (e *BudgetError) Error() string {
	if e.Scope == "day" {
		return fmt.Sprintf("You have used today's budget of $%.2f (spent $%.2f); it renews at midnight UTC.", e.LimitUSD, e.SpentUSD)
	}
	return fmt.Sprintf("This chat has used its budget of $%.2f (spent $%.2f); start a new chat to go on.", e.LimitUSD, e.SpentUSD)
}

// Is makes errors.Is(err, ErrOverBudget) hold.
func (e *BudgetError) Is(target error) bool { return target == ErrOverBudget }

// DayUsage is what one person's turns used on one day (UTC).
type DayUsage struct {
	Date string `json:"date"`
	// Messages is the turns that ended; AgentTurns the model turns in them.
	Messages                 int     `json:"messages"`
	AgentTurns               int     `json:"agent_turns"`
	CostUSD                  float64 `json:"cost_usd"`
	InputTokens              int64   `json:"input_tokens"`
	OutputTokens             int64   `json:"output_tokens"`
	CacheReadInputTokens     int64   `json:"cache_read_input_tokens"`
	CacheCreationInputTokens int64   `json:"cache_creation_input_tokens"`
	DurationMS               int64   `json:"duration_ms"`
}

func (d *DayUsage) add(u *supervisor.Usage) {
	d.Messages++
	d.AgentTurns += u.NumTurns
	d.CostUSD += u.CostUSD
	d.InputTokens += u.InputTokens
	d.OutputTokens += u.OutputTokens
	d.CacheReadInputTokens += u.CacheReadInputTokens
	d.CacheCreationInputTokens += u.CacheCreationInputTokens
	d.DurationMS += u.DurationMS
}

// ledger sums every person's usage per day. It is kept apart from the
// sessions, so clearing a chat does not reset what the person spent
// today. Recording only updates memory; its own goroutine writes the
// file (state-dir/usage.json), so a turn's end never waits on the disk.
type ledger struct {
	path string
	log  zerolog.Logger

	mu    sync.Mutex
	days  map[string]map[string]*DayUsage // person → date → usage
	dirty bool
	wake  chan struct{}
	stop  chan struct{}
	done  chan struct{}
}

// usageDays bounds the days the ledger keeps per person.
const usageDays = 400

func newLedger(dir string, log zerolog.Logger) *ledger {
	l := &ledger{log: log, days: map[string]map[string]*DayUsage{}, wake: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{})}
	if dir == "" {
		close(l.done)
		return l
	}
	l.path = filepath.Join(dir, "usage.json")
	if b, err := os.ReadFile(l.path); err == nil {
		if err := json.Unmarshal(b, &l.days); err != nil {
			log.Warn().Err(err).Str("file", l.path).Msg("usage ledger unreadable; starting a new one")
			l.days = map[string]map[string]*DayUsage{}
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		log.Warn().Err(err).Str("file", l.path).Msg("usage ledger unreadable; starting a new one")
	}
	go l.run()
	return l
}

func dateOf(t time.Time) string { return t.UTC().Format("2006-01-02") }

// record adds a turn's usage to the person's day.
func (l *ledger) record(person string, at time.Time, u *supervisor.Usage) {
	l.mu.Lock()
	days := l.days[person]
	if days == nil {
		days = map[string]*DayUsage{}
		l.days[person] = days
	}
	date := dateOf(at)
	d := days[date]
	if d == nil {
		d = &DayUsage{Date: date}
		days[date] = d
		if len(days) > usageDays {
			oldest := date
			for k := range days {
				oldest = min(oldest, k)
			}
			delete(days, oldest)
		}
	}
	d.add(u)
	l.dirty = true
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// spent is what the person spent on the day of at.
func (l *ledger) spent(person string, at time.Time) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if d := l.days[person][dateOf(at)]; d != nil {
		return d.CostUSD
	}
	return 0
}

// lastDays is the person's usage on each of the n days up to the day of
// now, newest first (days without turns included, as zero).
func (l *ledger) lastDays(person string, now time.Time, n int) []DayUsage {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]DayUsage, 0, n)
	for i := range n {
		date := dateOf(now.AddDate(0, 0, -i))
		if d := l.days[person][date]; d != nil {
			out = append(out, *d)
		} else {
			out = append(out, DayUsage{Date: date})
		}
	}
	return out
}

func (l *ledger) run() {
	defer close(l.done)
	for {
		select {
		case <-l.wake:
			l.save()
		case <-l.stop:
			l.save()
			return
		}
	}
}

func (l *ledger) save() {
	l.mu.Lock()
	if !l.dirty {
		l.mu.Unlock()
		return
	}
	b, err := json.Marshal(l.days)
	l.dirty = false
	l.mu.Unlock()
	if err == nil {
		err = atomicfile.Write(l.path, b)
	}
	if err != nil {
		l.log.Error().Err(err).Msg("usage ledger not saved")
	}
}

// close writes what is recorded and stops the writer; idempotent.
func (l *ledger) close() {
	if l.path != "" {
		select {
		case <-l.stop:
		default:
			close(l.stop)
		}
	}
	<-l.done
}

// Usage is the person's usage on each of the last days days, newest
// first, with their limits and what they spent today.
type Usage struct {
	Person string     `json:"person"`
	Days   []DayUsage `json:"days"`
	Total  DayUsage   `json:"total"`
	Limits Limits     `json:"limits"`
	// TodayUSD is what the person spent today, against Limits.PersonDayUSD.
	TodayUSD float64 `json:"today_usd"`
}

// Usage sums the person's turns per day over the last days days.
func (s *Registry) Usage(person string, days int) Usage {
	now := s.cfg.Now()
	u := Usage{Person: person, Days: s.ledger.lastDays(person, now, days), Limits: s.limits(person), TodayUSD: s.ledger.spent(person, now)}
	for _, d := range u.Days {
		u.Total.Messages += d.Messages
		u.Total.AgentTurns += d.AgentTurns
		u.Total.CostUSD += d.CostUSD
		u.Total.InputTokens += d.InputTokens
		u.Total.OutputTokens += d.OutputTokens
		u.Total.CacheReadInputTokens += d.CacheReadInputTokens
		u.Total.CacheCreationInputTokens += d.CacheCreationInputTokens
		u.Total.DurationMS += d.DurationMS
	}
	if len(u.Days) > 0 {
		u.Total.Date = u.Days[len(u.Days)-1].Date + "/" + u.Days[0].Date
	}
	return u
}

func (s *Registry) limits(person string) Limits {
	if s.cfg.Limits == nil {
		return Limits{}
	}
	return s.cfg.Limits(person)
}

// allowance is what the next turn of c may spend and how many agent
// turns it may take; a BudgetError when nothing is left.
func (s *Registry) allowance(c *Session) (budget float64, maxTurns int, err error) {
	lim := s.limits(c.Person)
	budget = -1
	if lim.SessionUSD > 0 {
		spent := c.Spent()
		if spent >= lim.SessionUSD {
			return 0, 0, &BudgetError{Scope: "session", LimitUSD: lim.SessionUSD, SpentUSD: spent}
		}
		budget = lim.SessionUSD - spent
	}
	if lim.PersonDayUSD > 0 {
		spent := s.ledger.spent(c.Person, s.cfg.Now())
		if spent >= lim.PersonDayUSD {
			return 0, 0, &BudgetError{Scope: "day", LimitUSD: lim.PersonDayUSD, SpentUSD: spent}
		}
		if left := lim.PersonDayUSD - spent; budget < 0 || left < budget {
			budget = left
		}
	}
	return max(budget, 0), lim.MaxTurns, nil
}

// Admit checks that c may take message now: a BudgetError if the session
// or its person has spent their budget, which the session's events
// stream shows as a refused event.
func (s *Registry) Admit(c *Session, message string) error {
	_, _, err := s.allowance(c)
	var over *BudgetError
	if errors.As(err, &over) {
		c.mu.Lock()
		c.stream.publishJSON(refusedEvent{Type: "refused", Message: message, Kind: kindBudget, Error: over.Error()}, false, false)
		c.mu.Unlock()
	}
	return err
}
