package auth

import (
	"math"
	"sync"
	"time"
)

// Limiter limits failed attempts (a wrong token, a wrong pairing code)
// per client address: each address has Burst attempts, and earns one
// back every Every. While it has none left every attempt of that address
// is refused, right or wrong, so guessing gets nowhere and a client that
// keeps failing learns nothing more.
type Limiter struct {
	burst float64
	every time.Duration
	now   func() time.Time

	mu      sync.Mutex
	clients map[string]*bucket
}

type bucket struct {
	left float64
	at   time.Time
}

// maxClients bounds the addresses remembered; past it, those that have
// earned all their attempts back are forgotten first.
const maxClients = 10000

// NewLimiter allows burst failed attempts per address, one more every
// every; now is the clock (time.Now when nil).
func NewLimiter(burst int, every time.Duration, now func() time.Time) *Limiter {
	if now == nil {
		now = time.Now
	}
	return &Limiter{burst: float64(burst), every: every, now: now, clients: map[string]*bucket{}}
}

// refill brings b up to now; the lock is held.
func (l *Limiter) refill(b *bucket, now time.Time) {
	b.left = math.Min(l.burst, b.left+float64(now.Sub(b.at))/float64(l.every))
	b.at = now
}

// Wait is how long addr must wait before its next attempt; 0: it may try
// now.
func (l *Limiter) Wait(addr string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.clients[addr]
	if !ok {
		return 0
	}
	now := l.now()
	l.refill(b, now)
	if b.left >= 1 {
		return 0
	}
	return time.Duration((1 - b.left) * float64(l.every))
}

// Fail counts a failed attempt of addr.
func (l *Limiter) Fail(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b, ok := l.clients[addr]
	if !ok {
		if len(l.clients) >= maxClients {
			l.forget(now)
		}
		b = &bucket{left: l.burst, at: now}
		l.clients[addr] = b
	}
	l.refill(b, now)
	b.left = math.Max(0, b.left-1)
}

// forget drops the addresses that have all their attempts back, or, if
// none has, one at random; the lock is held.
func (l *Limiter) forget(now time.Time) {
	for a, b := range l.clients {
		if l.refill(b, now); b.left >= l.burst {
			delete(l.clients, a)
		}
	}
	for a := range l.clients {
		if len(l.clients) < maxClients {
			return
		}
		delete(l.clients, a)
	}
}
