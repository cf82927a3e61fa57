package assembly_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/assembly"
)

// expirer is an assembly.Expirer that calls its function.
type expirer func() int

func (f expirer) Expire() int { return f() }

// startCounting starts an expiry every millisecond and waits until it has
// expired twice; Expire fails the test once stopped is set.
func startCounting(tb testing.TB, ctx context.Context, stopped *atomic.Bool) *assembly.Expiry {
	tb.Helper()
	calls := make(chan struct{}, 1)
	e := assembly.StartExpiry(ctx, assembly.ExpiryConfig{
		Sessions: expirer(func() int {
			if stopped.Load() {
				tb.Error("Expire ran after the expiry was closed")
			}
			select {
			case calls <- struct{}{}:
			default:
			}
			return 1
		}),
		Every:  time.Millisecond,
		Logger: zerolog.Nop(),
	})
	<-calls
	<-calls
	return e
}

func TestExpiryRunsUntilClosed(t *testing.T) {
	var stopped atomic.Bool
	e := startCounting(t, context.Background(), &stopped)
	e.Close()
	stopped.Store(true)
	e.Close() // a second Close returns at once
}

// TestExpiryStopsWithItsContext: without Close, the end of the context
// stops the loop (goleak, in TestMain, finds it otherwise).
func TestExpiryStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var stopped atomic.Bool
	startCounting(t, ctx, &stopped)
	cancel()
}

func TestExpiryDefaultsToHourly(t *testing.T) {
	e := assembly.StartExpiry(context.Background(), assembly.ExpiryConfig{
		Sessions: expirer(func() int { t.Error("expired before the first hour"); return 0 }),
		Logger:   zerolog.Nop(),
	})
	e.Close()
}
