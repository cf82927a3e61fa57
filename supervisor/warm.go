package supervisor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"
)

// WarmConfig configures the warm pool: processes started ahead of time in
// a person's vault, with their sessions' flags, initialised and waiting
// for the first message of the person's next new session.
type WarmConfig struct {
	// PerPerson is how many processes wait for each recently active
	// person; 0 keeps none.
	PerPerson int
	// Recent is how long after their last activity a person counts as
	// recently active; default the pool's IdleTimeout, else 15m.
	Recent time.Duration
	// Launch says how person's new sessions start: their vault, their
	// Spec, and the handlers a waiting process needs before a session
	// takes it (the CLI connects to its SDK MCP servers at start-up).
	Launch func(person string) WarmLaunch
	// Retry is how long after a failed start the pool tries again for the
	// same person; default 30s.
	Retry time.Duration
}

// WarmLaunch is how one person's new sessions start.
type WarmLaunch struct {
	Dir      string
	Spec     Spec
	Handlers Handlers
}

// Fingerprint identifies everything a process is started with: binary
// (and its size and time, so a reinstalled CLI counts as another one),
// environment, working directory, sandbox, flags and the initialize
// request (not the process's own credential). A
// waiting process serves a session only if both fingerprints are equal.
func (s Spec) Fingerprint(dir string) string {
	h := sha256.New()
	enc := json.NewEncoder(h)
	bin := ""
	if st, err := os.Stat(s.Binary); err == nil {
		bin = fmt.Sprintf("%d %d", st.Size(), st.ModTime().UnixNano())
	}
	_ = enc.Encode([]any{s.Binary, bin, s.Env, dir, s.Command(""), s.initializeBody()})
	return hex.EncodeToString(h.Sum(nil))
}

// warmProc is one process of the warm pool. Until a session takes it,
// its output is dropped and its control requests go to the launch's
// handlers; afterwards both go to the session.
type warmProc struct {
	person string
	fp     string
	// cred is the process's access to the model; a session that takes
	// the process binds it.
	cred Credential
	// proc is set, under the pool's lock, once the process is ready;
	// nil while it starts.
	proc  *Process
	since time.Time
	// exited is closed once the process is gone and the pool has
	// forgotten it (its pid record included).
	exited chan struct{}

	mu   sync.Mutex
	cli  *CLI
	h    Handlers
	gone bool
}

// bind hands the process to c; false if it has exited already.
func (w *warmProc) bind(c *CLI, h Handlers) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.gone {
		return false
	}
	w.cli, w.h = c, h
	if w.cred.Bind != nil {
		w.cred.Bind(c.cfg.ID)
	}
	return true
}

func (w *warmProc) target() (*CLI, Handlers) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cli, w.h
}

// handlers forward each control request to whoever holds the process now.
func (w *warmProc) handlers() Handlers {
	return Handlers{
		CanUseTool: func(ctx context.Context, req *ControlRequest) (PermissionResult, error) {
			if _, h := w.target(); h.CanUseTool != nil {
				return h.CanUseTool(ctx, req)
			}
			return PermissionResult{}, errors.New("no session holds this process yet")
		},
		HookCallback: func(ctx context.Context, req *ControlRequest) (json.RawMessage, error) {
			if _, h := w.target(); h.HookCallback != nil {
				return h.HookCallback(ctx, req)
			}
			return nil, errors.New("no session holds this process yet")
		},
		MCPMessage: func(ctx context.Context, server string, msg json.RawMessage) (json.RawMessage, error) {
			if _, h := w.target(); h.MCPMessage != nil {
				return h.MCPMessage(ctx, server, msg)
			}
			return nil, fmt.Errorf("no MCP server named %q", server)
		},
	}
}

// Warm starts the warm pool; it runs until Close, which also stops every
// process still waiting. Call it once, before sessions send.
func (p *Pool) Warm(cfg WarmConfig) {
	if cfg.PerPerson <= 0 || cfg.Launch == nil {
		return
	}
	if cfg.Recent <= 0 {
		cfg.Recent = p.cfg.IdleTimeout
	}
	if cfg.Recent <= 0 {
		cfg.Recent = 15 * time.Minute
	}
	if cfg.Retry <= 0 {
		cfg.Retry = 30 * time.Second
	}
	p.mu.Lock()
	p.warmCfg = cfg
	p.mu.Unlock()
	p.stopped.Add(1)
	go p.warmLoop()
}

// Touch marks person as active now: the warm pool keeps processes ready
// for their next new session.
func (p *Pool) Touch(person string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.warmCfg.PerPerson <= 0 {
		return
	}
	_, known := p.active[person]
	p.active[person] = time.Now()
	if !known {
		p.signalLocked()
	}
}

// Release stops person's waiting processes and starts none for them
// until they are active again (their state moves to another server: a
// process waiting in their CLI home must not write to it). It returns
// once none of theirs waits, or with ctx's error.
func (p *Pool) Release(ctx context.Context, person string) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		p.mu.Lock()
		delete(p.active, person)
		var ready []*warmProc
		starting := false
		for w := range p.warm {
			if w.person != person {
				continue
			}
			if w.proc == nil {
				starting = true // stopped by the warm loop once started
				continue
			}
			delete(p.warm, w)
			ready = append(ready, w)
		}
		p.mu.Unlock()
		for _, w := range ready {
			w.stop()
		}
		p.mu.Lock()
		p.signalLocked()
		p.mu.Unlock()
		if !starting {
			return nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("stop %s's waiting processes: %w", person, ctx.Err())
		}
	}
}

// PoolStats counts the pool's processes.
type PoolStats struct {
	// Live is every process alive or starting, waiting ones included.
	Live int
	// Warm is the processes that wait for a new session (ready or starting).
	Warm int
	// Starts is how many processes sessions started themselves;
	// WarmStarts how many the warm pool started; Taken how many of those
	// a session took.
	Starts, WarmStarts, Taken int64
}

// Stats reports the pool's counts.
func (p *Pool) Stats() PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return PoolStats{Live: p.totalLocked(), Warm: len(p.warm), Starts: p.starts, WarmStarts: p.warmStarts, Taken: p.taken}
}

// Waiting is the number of processes ready for a new session.
func (p *Pool) Waiting() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for w := range p.warm {
		if w.proc != nil {
			n++
		}
	}
	return n
}

// WarmPids lists the pids of person's processes that are ready for a new
// session.
func (p *Pool) WarmPids(person string) []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []int
	for w := range p.warm {
		if w.person == person && w.proc != nil {
			out = append(out, w.proc.Pid())
		}
	}
	sort.Ints(out)
	return out
}

// take gives c, a session with no conversation yet, a ready process of
// its person's started with exactly c's configuration, or nil. A waiting
// process of the person's with another configuration is stopped; the
// warm pool starts its replacement.
func (p *Pool) take(c *CLI) *warmProc {
	p.mu.Lock()
	none := len(p.warm) == 0
	p.mu.Unlock()
	if none {
		return nil
	}
	fp := c.cfg.Spec.Fingerprint(c.cfg.Dir)
	p.mu.Lock()
	var got *warmProc
	var stale []*warmProc
	for w := range p.warm {
		if w.person != c.Person() || w.proc == nil {
			continue
		}
		if w.fp != fp {
			delete(p.warm, w)
			stale = append(stale, w)
			continue
		}
		if got == nil {
			got = w
		}
	}
	if got != nil {
		delete(p.warm, got)
		p.live[got.proc] = c
		p.taken++
		p.settling[c.Person()] = time.Now().Add(settleBound)
	}
	if got != nil {
		p.signalLocked()
	}
	p.mu.Unlock()
	if len(stale) == 0 {
		return got
	}
	for _, w := range stale {
		p.log.Info().Str("person", w.person).Msg("stopped a waiting claude started with another configuration")
		w.stop()
	}
	// Only now is their slot free for a replacement.
	p.mu.Lock()
	p.signalLocked()
	p.mu.Unlock()
	return got
}

// settleBound bounds how long a replacement waits for the turn that took
// a waiting process to show its first output.
const settleBound = 10 * time.Second

// settled lets the replacement of person's waiting process start: the
// turn that took it has shown its first output, or ended.
func (p *Pool) settled(person string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.settling[person]; ok {
		delete(p.settling, person)
		p.signalLocked()
	}
}

// evictWarmLocked takes a ready waiting process (of owner's, unless owner
// is "") out of the pool, the longest waiting first, for the caller to
// stop; nil if there is none.
func (p *Pool) evictWarmLocked(owner string) *warmProc {
	var victim *warmProc
	for w := range p.warm {
		if w.proc == nil || (owner != "" && w.person != owner) {
			continue
		}
		if victim == nil || w.since.Before(victim.since) {
			victim = w
		}
	}
	if victim != nil {
		delete(p.warm, victim)
	}
	return victim
}

// stop ends a waiting process at once: it holds no conversation yet.
func (w *warmProc) stop() {
	if w.proc == nil {
		return
	}
	w.proc.Kill()
	<-w.exited
}

// warmLoop keeps the warm pool filled: for each recently active person,
// PerPerson ready processes with the current configuration (the first in
// the slot of an idle session's process if need be, the others in free
// slots only), never while a turn waits for a slot.
func (p *Pool) warmLoop() {
	defer p.stopped.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-p.stop
		cancel()
	}()
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	retry := map[string]time.Time{}
	for {
		p.mu.Lock()
		changed := p.changed
		p.mu.Unlock()
		for p.fillWarm(ctx, retry) {
		}
		select {
		case <-p.stop:
			return
		case <-changed:
		case <-tick.C:
		}
	}
}

// fillWarm starts at most one waiting process, or stops the idle
// session's process whose slot one needs, and reports whether it did
// either; it also stops the waiting processes nobody needs any more.
func (p *Pool) fillWarm(ctx context.Context, retry map[string]time.Time) bool {
	if ctx.Err() != nil {
		return false
	}
	cfg := p.warmCfg
	now := time.Now()
	p.mu.Lock()
	type want struct {
		person string
		last   time.Time
	}
	var persons []want
	for person, last := range p.active {
		if now.Sub(last) > cfg.Recent {
			delete(p.active, person)
			continue
		}
		persons = append(persons, want{person, last})
	}
	sort.Slice(persons, func(i, j int) bool { return persons[i].last.After(persons[j].last) })
	p.mu.Unlock()

	var stale []*warmProc
	launches := map[string]WarmLaunch{}
	fps := map[string]string{}
	for _, w := range persons {
		l := cfg.Launch(w.person)
		launches[w.person], fps[w.person] = l, l.Spec.Fingerprint(l.Dir)
	}
	p.mu.Lock()
	for w := range p.warm {
		if fp, ok := fps[w.person]; w.proc != nil && (!ok || fp != w.fp) {
			// The person is no longer active, or their sessions now
			// start with another configuration.
			delete(p.warm, w)
			stale = append(stale, w)
		}
	}
	if len(stale) > 0 {
		// They are gone before their slots go to anyone else.
		p.mu.Unlock()
		for _, w := range stale {
			w.stop()
		}
		p.mu.Lock()
	}
	var next *warmProc
	var launch WarmLaunch
	var victims []*CLI
	for _, w := range persons {
		if p.waiters > 0 {
			// A turn waiting for a slot outranks every waiting process.
			break
		}
		if now.Before(retry[w.person]) {
			continue
		}
		if until, ok := p.settling[w.person]; ok {
			if now.Before(until) {
				continue
			}
			delete(p.settling, w.person)
		}
		have := 0
		for x := range p.warm {
			if x.person == w.person {
				have++
			}
		}
		if have >= cfg.PerPerson {
			continue
		}
		full := p.cfg.Max > 0 && p.totalLocked() >= p.cfg.Max
		capped := p.cfg.MaxPerPerson > 0 && p.heldLocked(w.person) >= p.cfg.MaxPerPerson
		if full || capped {
			// The person's first waiting process outranks an idle
			// session's: the least recently used one (the person's own
			// at their share) is stopped to make room, but never the
			// person's most recently used chat, which their next message
			// most likely continues (with a share of one, that chat
			// keeps its process). More waiting processes take free
			// slots only.
			if have == 0 {
				if victims = p.warmVictimsLocked(w.person, capped); len(victims) > 0 {
					break
				}
			}
			continue
		}
		next = &warmProc{person: w.person, fp: fps[w.person]}
		launch = launches[w.person]
		p.warm[next] = struct{}{}
		p.warmStarts++
		break
	}
	p.mu.Unlock()
	if len(victims) > 0 {
		// With the slot free, the next round starts the process.
		return p.stopForRoom(victims, "a waiting claude")
	}
	if next == nil {
		return false
	}
	if err := p.startWarm(ctx, next, launch); err != nil {
		p.mu.Lock()
		delete(p.warm, next)
		p.signalLocked()
		p.mu.Unlock()
		if ctx.Err() == nil {
			retry[next.person] = time.Now().Add(cfg.Retry)
			p.log.Warn().Err(err).Str("person", next.person).Msg("could not start a waiting claude")
		}
		return false
	}
	return true
}

// warmVictimsLocked are the idle sessions whose processes may make room
// for person's one waiting process, least recently used first: the
// person's own when they are at their share (capped), anyone's
// otherwise; never the person's most recently used session.
func (p *Pool) warmVictimsLocked(person string, capped bool) []*CLI {
	owner := ""
	if capped {
		owner = person
	}
	return p.idleLocked(p.latestLocked(person), owner)
}

// startWarm starts and initialises w's process. It is in the pool (as
// starting) already; once ready, sessions can take it.
func (p *Pool) startWarm(ctx context.Context, w *warmProc, l WarmLaunch) error {
	w.h = l.Handlers
	w.exited = make(chan struct{})
	var proc *Process
	started := make(chan struct{})
	w.cred = l.Spec.credential("")
	argv := l.Spec.Command("")
	proc, err := StartProcess(ProcessConfig{
		Path:     argv[0],
		Args:     argv[1:],
		Dir:      l.Dir,
		Env:      l.Spec.env(w.cred),
		Handlers: w.handlers(),
		OnMessage: func(m *Message) {
			<-started
			if c, _ := w.target(); c != nil {
				c.onMessage(proc, m)
			}
		},
		OnExit: func(err error) {
			<-started
			defer close(w.exited)
			w.cred.revoke()
			p.exited(proc)
			w.mu.Lock()
			w.gone = true
			c := w.cli
			w.mu.Unlock()
			if c != nil {
				c.onExit(proc, err)
			} else if err != nil && ctx.Err() == nil {
				p.log.Info().Err(err).Str("person", w.person).Msg("a waiting claude exited; the pool starts another")
			}
		},
		Grace:  l.Spec.grace(),
		Logger: p.log.With().Str("person", w.person).Logger(),
	})
	if err != nil {
		w.cred.revoke()
		return err
	}
	close(started)
	p.recordPid(proc)
	ictx, cancel := context.WithTimeout(ctx, l.Spec.initTimeout())
	defer cancel()
	if _, err := proc.Request(ictx, "initialize", l.Spec.initializeBody()); err != nil {
		proc.Kill()
		<-w.exited
		if r := p.noteRefusal(w.person, proc, p.log); r != nil {
			return fmt.Errorf("start claude: %w", r)
		}
		return fmt.Errorf("initialize: %w", err)
	}
	p.noteStarted(w.person)
	p.mu.Lock()
	_, kept := p.warm[w]
	if kept && ctx.Err() == nil {
		// Ready: from now on a session may take it and a turn that needs
		// a slot may evict it.
		w.proc, w.since = proc, time.Now()
		p.signalLocked()
	}
	p.mu.Unlock()
	if w.proc == nil {
		proc.Kill()
		<-w.exited
		return errors.New("the pool stopped")
	}
	p.log.Info().Int("pid", proc.Pid()).Str("person", w.person).Msg("a claude waits for the next new session")
	return nil
}
