// Package usage keeps what each person's turns used per day (cost,
// tokens, agent turns, time) in their folder of the state directory
// (state-dir/persons/<person>/usage.json, see personstate), for the
// per-day budget and GET /usage. It owns those files and their writer
// goroutine; it must not decide budgets (relay does) or know sessions.
package usage

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/internal/atomicfile"
	"github.com/majorhq/major/personstate"
	"github.com/majorhq/major/supervisor"
)

// Day is what one person's turns used on one day (UTC).
type Day struct {
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

// add counts one message whose turn used u.
func (d *Day) add(u *supervisor.Usage) {
	d.plus(Day{Messages: 1, AgentTurns: u.NumTurns, CostUSD: u.CostUSD,
		InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
		CacheReadInputTokens: u.CacheReadInputTokens, CacheCreationInputTokens: u.CacheCreationInputTokens,
		DurationMS: u.DurationMS})
}

// plus adds o's counts (not its date) to d.
func (d *Day) plus(o Day) {
	d.Messages += o.Messages
	d.AgentTurns += o.AgentTurns
	d.CostUSD += o.CostUSD
	d.InputTokens += o.InputTokens
	d.OutputTokens += o.OutputTokens
	d.CacheReadInputTokens += o.CacheReadInputTokens
	d.CacheCreationInputTokens += o.CacheCreationInputTokens
	d.DurationMS += o.DurationMS
}

// Sum adds days up; its Date is the span "oldest/newest" of days, given
// newest first.
func Sum(days []Day) Day {
	var t Day
	for _, d := range days {
		t.plus(d)
	}
	if len(days) > 0 {
		t.Date = days[len(days)-1].Date + "/" + days[0].Date
	}
	return t
}

// Ledger sums every person's usage per day. It is kept apart from the
// sessions, so clearing a chat does not reset what the person spent
// today. Recording only updates memory; its own goroutine writes the
// changed persons' files, so a turn's end never waits on the disk.
type Ledger struct {
	dir string
	log zerolog.Logger

	mu    sync.Mutex
	days  map[string]map[string]*Day // person → date → usage
	dirty map[string]bool
	wake  chan struct{}
	stop  chan struct{}
	done  chan struct{}
	// saving is held while files are written, so Release's own write
	// and the writer's never cross.
	saving sync.Mutex
}

// keepDays bounds the days the ledger keeps per person.
const keepDays = 400

// Open reads the usage of every person with a folder in the state
// directory dir, or starts an empty one for a person whose file is
// unreadable (logged); dir "" keeps it in memory only.
func Open(dir string, log zerolog.Logger) *Ledger {
	l := &Ledger{dir: dir, log: log, days: map[string]map[string]*Day{}, dirty: map[string]bool{},
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	if dir == "" {
		close(l.done)
		return l
	}
	persons, err := personstate.List(dir)
	if err != nil {
		log.Warn().Err(err).Msg("usage ledger unreadable; starting a new one")
	}
	for _, p := range persons {
		l.Load(p)
	}
	go l.run()
	return l
}

// Load reads person's usage from their file, in place of what the ledger
// held of them (a person taken in from another server).
func (l *Ledger) Load(person string) {
	if l.dir == "" {
		return
	}
	path := personstate.File(l.dir, person, personstate.UsageFile)
	days := map[string]*Day{}
	if b, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(b, &days); err != nil {
			l.log.Warn().Err(err).Str("file", path).Msg("usage ledger unreadable; starting a new one")
			days = map[string]*Day{}
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		l.log.Warn().Err(err).Str("file", path).Msg("usage ledger unreadable; starting a new one")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.dirty, person)
	if len(days) == 0 {
		delete(l.days, person)
		return
	}
	l.days[person] = days
}

// Release writes person's usage to their file now and forgets it (a
// person moving to another server); a later Add starts them anew.
func (l *Ledger) Release(person string) error {
	l.saving.Lock()
	defer l.saving.Unlock()
	l.mu.Lock()
	days, dirty := l.days[person], l.dirty[person]
	delete(l.days, person)
	delete(l.dirty, person)
	var b []byte
	var err error
	if dirty && l.dir != "" {
		b, err = json.Marshal(days)
	}
	l.mu.Unlock()
	if err != nil || b == nil {
		return err
	}
	return l.write(person, b)
}

func dateOf(t time.Time) string { return t.UTC().Format("2006-01-02") }

// Record adds a turn's usage to the person's day.
func (l *Ledger) Record(person string, at time.Time, u *supervisor.Usage) {
	var d Day
	d.add(u)
	l.Add(person, at, d)
}

// Add adds the counts of d (not its date) to the person's day of at:
// one model request's cost and tokens, or one message and its time.
func (l *Ledger) Add(person string, at time.Time, delta Day) {
	l.mu.Lock()
	days := l.days[person]
	if days == nil {
		days = map[string]*Day{}
		l.days[person] = days
	}
	date := dateOf(at)
	d := days[date]
	if d == nil {
		d = &Day{Date: date}
		days[date] = d
		if len(days) > keepDays {
			oldest := date
			for k := range days {
				oldest = min(oldest, k)
			}
			delete(days, oldest)
		}
	}
	d.plus(delta)
	l.dirty[person] = true
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// Spent is what the person spent on the day of at.
func (l *Ledger) Spent(person string, at time.Time) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if d := l.days[person][dateOf(at)]; d != nil {
		return d.CostUSD
	}
	return 0
}

// LastDays is the person's usage on each of the n days up to the day of
// now, newest first (days without turns included, as zero).
func (l *Ledger) LastDays(person string, now time.Time, n int) []Day {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Day, 0, n)
	for i := range n {
		date := dateOf(now.AddDate(0, 0, -i))
		if d := l.days[person][date]; d != nil {
			out = append(out, *d)
		} else {
			out = append(out, Day{Date: date})
		}
	}
	return out
}

func (l *Ledger) run() {
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

// save writes the files of the persons whose usage changed.
func (l *Ledger) save() {
	l.saving.Lock()
	defer l.saving.Unlock()
	l.mu.Lock()
	files := make(map[string][]byte, len(l.dirty))
	for p := range l.dirty {
		b, err := json.Marshal(l.days[p])
		if err != nil {
			l.log.Error().Err(err).Str("person", p).Msg("usage ledger not saved")
			continue
		}
		files[p] = b
	}
	clear(l.dirty)
	l.mu.Unlock()
	for p, b := range files {
		if err := l.write(p, b); err != nil {
			l.log.Error().Err(err).Str("person", p).Msg("usage ledger not saved")
		}
	}
}

// write replaces person's file with b.
func (l *Ledger) write(person string, b []byte) error {
	path := personstate.File(l.dir, person, personstate.UsageFile)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return atomicfile.Write(path, b)
}

// Close writes what is recorded and stops the writer; idempotent.
func (l *Ledger) Close() {
	if l.dir != "" {
		select {
		case <-l.stop:
		default:
			close(l.stop)
		}
	}
	<-l.done
}
