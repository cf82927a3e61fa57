package assembly

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/relay"
)

// Expirer forgets sessions idle past their time to live and reports how
// many; *relay.Registry satisfies it.
type Expirer interface {
	Expire() int
}

var _ Expirer = (*relay.Registry)(nil)

// ExpiryConfig configures an Expiry.
type ExpiryConfig struct {
	Sessions Expirer
	// Every is how often idle sessions are looked for; default an hour.
	Every  time.Duration
	Logger zerolog.Logger
}

// Expiry expires old sessions while the server runs, not only at start.
// It owns one goroutine, which stops when the context given to
// StartExpiry ends or Close is called.
type Expiry struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// StartExpiry starts expiring sessions every cfg.Every until ctx ends or
// Close is called.
func StartExpiry(ctx context.Context, cfg ExpiryConfig) *Expiry {
	if cfg.Every <= 0 {
		cfg.Every = time.Hour
	}
	ctx, cancel := context.WithCancel(ctx)
	e := &Expiry{cancel: cancel, done: make(chan struct{})}
	go e.run(ctx, cfg)
	return e
}

func (e *Expiry) run(ctx context.Context, cfg ExpiryConfig) {
	defer close(e.done)
	tick := time.NewTicker(cfg.Every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if n := cfg.Sessions.Expire(); n > 0 {
				cfg.Logger.Info().Int("sessions", n).Msg("expired idle sessions")
			}
		}
	}
}

// Close stops the loop and waits for it; an expiry under way finishes
// first. It can be called more than once.
func (e *Expiry) Close() {
	e.cancel()
	<-e.done
}
