package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/majorhq/major/supervisor"
	"github.com/majorhq/major/vault"
)

// ErrMoving refuses the messages of a person whose state is moving to
// another server.
var ErrMoving = fmt.Errorf("%w: moving to another server", ErrUnavailable)

// Release ends all of person's sessions and forgets them, leaving what
// they keep on disk as it is, so their folder can move to another server:
// from now on none of theirs is created; messages waiting are refused
// (ErrMoving); running turns are interrupted and awaited, with the work at
// their end (the commit of what they changed); each log is written and
// closed; their usage is written. It returns once that is done, or with
// ctx's error, the person still released. Adopt undoes it.
func (r *Registry) Release(ctx context.Context, person string) error {
	r.mu.Lock()
	if r.away == nil {
		r.away = map[string]bool{}
	}
	r.away[person] = true
	chats := r.sessionsOfLocked(person)
	r.mu.Unlock()
	for _, c := range chats {
		c.cancelQueue(ErrMoving)
	}
	var wg sync.WaitGroup
	for _, c := range chats {
		if !c.stream.TurnOpen() {
			continue
		}
		wg.Go(func() {
			if err := c.Interrupt(ctx); err != nil && !errors.Is(err, supervisor.ErrNotRunning) {
				c.log.Warn().Err(err).Msg("interrupt as the person moves")
			}
		})
	}
	wg.Wait()
	// A turn is over once its terminal event is in the stream and the
	// work at its end (which runs once it is) has finished: no session
	// of the person's holds a message, a queue or a turn end.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for busy := true; busy; {
		busy = false
		for _, c := range chats {
			c.mu.Lock()
			busy = busy || !c.idleLocked() || c.stream.TurnOpen() || c.ending.Load() > 0
			c.mu.Unlock()
		}
		if !busy {
			break
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("release %s's sessions: %w", person, ctx.Err())
		}
	}
	r.mu.Lock()
	for _, c := range chats {
		delete(r.byID, c.ID)
	}
	r.mu.Unlock()
	var errs []error
	for _, c := range chats {
		c.cancel()
		c.mu.Lock()
		c.notify.Settled(c.Person, c.ID, "")
		c.mu.Unlock()
		if err := c.shutDown(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := r.ledger.Release(person); err != nil {
		errs = append(errs, fmt.Errorf("write %s's usage: %w", person, err))
	}
	r.log.Info().Str("person", person).Int("sessions", len(chats)).Msg("released the person's sessions")
	return errors.Join(errs...)
}

// Moving reports whether person is released (Release) and not adopted
// again: their requests are refused with ErrMoving.
func (r *Registry) Moving(person string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.away[person]
}

// Adopt reads person's sessions and usage from the store (their folder
// came from another server, or stays after a Release that went no
// further) and serves them again; a session already served is left as
// it is. It reports how many sessions it took in.
func (r *Registry) Adopt(person string) (int, error) {
	if !vault.ValidPerson(person) {
		return 0, fmt.Errorf("person %q is %w", person, vault.ErrPersonName)
	}
	r.mu.Lock()
	delete(r.away, person)
	r.mu.Unlock()
	if r.cfg.Store == nil {
		return 0, nil
	}
	r.ledger.Load(person)
	saved, err := r.cfg.Store.LoadPerson(person)
	if err != nil {
		return 0, fmt.Errorf("read %s's sessions: %w", person, err)
	}
	n := 0
	for _, sv := range saved {
		var m meta
		if err := json.Unmarshal(sv.Index, &m); err != nil || m.ID != sv.ID || m.Person != person {
			r.log.Warn().Str("dir", r.cfg.Store.SessionDir(person, sv.ID)).Msg("session with a bad index entry; skipped")
			continue
		}
		r.mu.Lock()
		_, served := r.byID[m.ID]
		r.mu.Unlock()
		if served {
			continue
		}
		l := loaded{meta: m, events: readEvents(r.cfg.Store, r.log, person, m.ID, r.redactor(person))}
		if err := r.restore(l); err != nil {
			r.log.Warn().Err(err).Str("session", m.ID).Msg("could not restore session")
		}
		n++
	}
	r.log.Info().Str("person", person).Int("sessions", n).Msg("took in the person's sessions")
	return n, nil
}
