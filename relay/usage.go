package relay

import (
	"errors"
	"fmt"
	"time"

	"github.com/majorhq/major/clientevent"
	"github.com/majorhq/major/usage"
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

// Usage is the person's usage on each of the last days days, newest
// first, with their limits and what they spent today.
type Usage struct {
	Person string      `json:"person"`
	Days   []usage.Day `json:"days"`
	Total  usage.Day   `json:"total"`
	Limits Limits      `json:"limits"`
	// TodayUSD is what the person spent today, against Limits.PersonDayUSD.
	TodayUSD float64 `json:"today_usd"`
}

// Usage sums the person's turns per day over the last days days.
func (r *Registry) Usage(person string, days int) Usage {
	now := r.cfg.Now()
	u := Usage{Person: person, Days: r.ledger.LastDays(person, now, days), Limits: r.limits(person), TodayUSD: r.ledger.Spent(person, now)}
	u.Total = usage.Sum(u.Days)
	return u
}

func (r *Registry) limits(person string) Limits {
	if r.cfg.Limits == nil {
		return Limits{}
	}
	return r.cfg.Limits(person)
}

// allowance is what the next turn of c may spend and how many agent
// turns it may take; a BudgetError when nothing is left.
func (r *Registry) allowance(c *Session) (budget float64, maxTurns int, err error) {
	lim := r.limits(c.Person)
	budget = -1
	if lim.SessionUSD > 0 {
		spent := c.Spent()
		if spent >= lim.SessionUSD {
			return 0, 0, &BudgetError{Scope: "session", LimitUSD: lim.SessionUSD, SpentUSD: spent}
		}
		budget = lim.SessionUSD - spent
	}
	if lim.PersonDayUSD > 0 {
		spent := r.ledger.Spent(c.Person, r.cfg.Now())
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
func (r *Registry) Admit(c *Session, message string) error {
	_, _, err := r.allowance(c)
	var over *BudgetError
	if errors.As(err, &over) {
		c.mu.Lock()
		c.stream.publishJSON(clientevent.Refused{Type: "refused", Message: message, Kind: clientevent.KindBudget, Error: over.Error()}, false, false)
		c.refusedLocked(over)
		c.mu.Unlock()
	}
	return err
}

// Charge counts one model request a CLI of person's made for session (""
// for a process no session had taken yet): its cost and tokens go to the
// person's day and its cost to the session, at once, so the budgets hold
// within a turn and a turn cut off by a crash is paid for. Only with
// RegistryConfig.Metered.
func (r *Registry) Charge(person, session string, at time.Time, d usage.Day) {
	if !r.cfg.Metered {
		return
	}
	d.Date, d.Messages, d.AgentTurns, d.DurationMS = "", 0, 0, 0
	r.ledger.Add(person, at, d)
	if session == "" {
		return
	}
	if c, err := r.Get(session, person); err == nil {
		c.mu.Lock()
		c.metered += d.CostUSD
		c.mu.Unlock()
	}
}

// AdmitRequest checks, before a model request of person's session goes
// out, that neither the session nor the person has spent their budget:
// a BudgetError if one has. The session's next turn then ends with that
// error (see Refused).
func (r *Registry) AdmitRequest(person, session string) error {
	if session != "" {
		if c, err := r.Get(session, person); err == nil {
			_, _, err := r.allowance(c)
			return err
		}
	}
	lim := r.limits(person)
	if lim.PersonDayUSD > 0 {
		if spent := r.ledger.Spent(person, r.cfg.Now()); spent >= lim.PersonDayUSD {
			return &BudgetError{Scope: "day", LimitUSD: lim.PersonDayUSD, SpentUSD: spent}
		}
	}
	return nil
}

// Budgeted reports whether a budget bounds what person's session spends
// (session "": a process no session has taken yet, bounded by the day
// budget only), as AdmitRequest checks it; the model gateway then lets
// the session's model requests go one at a time, so each is checked
// against what the one before it cost.
func (s *Registry) Budgeted(person, session string) bool {
	lim := s.limits(person)
	return lim.PersonDayUSD > 0 || (session != "" && lim.SessionUSD > 0)
}

// Refused tells session that a model request of its was refused for err
// (a BudgetError): the turn that made it ends with that error, as a
// budget, rather than as the API error the CLI saw.
func (r *Registry) Refused(person, session string, err error) {
	var over *BudgetError
	if session == "" || !errors.As(err, &over) {
		return
	}
	if c, gerr := r.Get(session, person); gerr == nil {
		c.mu.Lock()
		c.refused = over
		c.mu.Unlock()
	}
}
