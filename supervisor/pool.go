package supervisor

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// ErrNoSlot is returned by Send when no CLI process slot freed up in time.
var ErrNoSlot = errors.New("all claude process slots are busy")

// ErrPersonBusy is returned by Send when the person already has as many
// CLI processes as one person may have, each running a turn, and none of
// them ended in time.
var ErrPersonBusy = errors.New("your other chats are busy and use every assistant process one person may run at once; wait for one to finish or stop it, then try again")

// PoolConfig bounds the CLI processes of all sessions.
type PoolConfig struct {
	// Max is the most processes alive at once; 0 means no limit. Each
	// claude process costs about 200 MB.
	Max int
	// MaxPerPerson is the most processes one person's sessions may hold at
	// once; 0 means no limit. Below Max it keeps room for the others: a
	// person holding their whole share waits for one of their own turns to
	// end, never for another person's.
	MaxPerPerson int
	// IdleTimeout stops a process whose session has been idle this long;
	// 0 never does. The next turn resumes transparently.
	IdleTimeout time.Duration
	// SlotWait is how long a turn waits for a slot before ErrNoSlot;
	// default 30s.
	SlotWait time.Duration
	// PIDDir records each live process group, so a server that died
	// without cleaning up can kill them at its next start (CleanOrphans).
	PIDDir string
	Logger zerolog.Logger
}

// Pool shares a bounded number of CLI process slots among sessions. Which
// process is worth its slot, first to last: a running turn's; then one
// process of the warm pool for each recently active person (see Warm);
// then idle sessions' processes, the most recently used first, and any
// further processes of the warm pool. So when it is full, a turn that
// needs a process stops the least recently used idle session's process,
// else a waiting one of the warm pool, else waits up to SlotWait; and the
// warm pool stops the least recently used idle session's process to start
// a person's one waiting process. A person at MaxPerPerson gives up one of
// their own, or waits for one of their own turns to end. The stopped
// sessions resume on their next turn.
type Pool struct {
	cfg PoolConfig
	log zerolog.Logger

	mu       sync.Mutex
	live     map[*Process]*CLI
	reserved map[string]int // person → slots reserved for processes starting
	changed  chan struct{}  // closed and replaced whenever a slot frees or a process goes idle
	waiters  int            // turns waiting for a slot

	// The warm pool: processes waiting for a person's next new session
	// (see Warm), and when each person was last active.
	warmCfg WarmConfig
	warm    map[*warmProc]struct{}
	active  map[string]time.Time

	starts, warmStarts, taken int64

	// settling is, per person, until when the replacement of a waiting
	// process a session took waits: until that session's turn has shown
	// its first output (settled), so the two starts do not share the
	// cores while the person waits for it.
	settling map[string]time.Time

	// refused is, per person, the last start of theirs the CLI refused
	// (see StartRefused), until one of theirs starts.
	refused map[string]StartRefused

	stop    chan struct{}
	stopped sync.WaitGroup
	once    sync.Once
}

// NewPool returns a pool; with an IdleTimeout it runs a reaper until Close.
func NewPool(cfg PoolConfig) *Pool {
	if cfg.SlotWait <= 0 {
		cfg.SlotWait = 30 * time.Second
	}
	p := &Pool{cfg: cfg, log: cfg.Logger, live: map[*Process]*CLI{}, reserved: map[string]int{},
		warm: map[*warmProc]struct{}{}, active: map[string]time.Time{}, refused: map[string]StartRefused{}, settling: map[string]time.Time{},
		changed: make(chan struct{}), stop: make(chan struct{})}
	if cfg.PIDDir != "" {
		if err := os.MkdirAll(cfg.PIDDir, 0o700); err != nil {
			p.log.Error().Err(err).Msg("pid dir; orphans will not be tracked")
			p.cfg.PIDDir = ""
		}
	}
	if cfg.IdleTimeout > 0 {
		p.stopped.Add(1)
		go p.reap()
	}
	return p
}

// Live is the number of live (or starting) processes, waiting ones
// included.
func (p *Pool) Live() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.totalLocked()
}

func (p *Pool) totalLocked() int {
	n := len(p.live) + len(p.warm)
	for _, r := range p.reserved {
		n += r
	}
	return n
}

// heldLocked is the number of processes (live, starting or waiting in the
// warm pool) of person's.
func (p *Pool) heldLocked(person string) int {
	n := p.reserved[person]
	for _, c := range p.live {
		if c.Person() == person {
			n++
		}
	}
	for w := range p.warm {
		if w.person == person {
			n++
		}
	}
	return n
}

// acquire reserves a slot for a process about to start.
func (p *Pool) acquire(ctx context.Context, self *CLI) error {
	return p.acquireFor(ctx, self.Person(), self, func() { self.publish(Event{Kind: EventSlotWait}) })
}

// Hold takes a slot for a process the pool does not run itself (a
// terminal's claude), for person, waiting and evicting idle sessions' processes as a
// session's turn does; release gives it back and is idempotent.
func (p *Pool) Hold(ctx context.Context, person string) (release func(), err error) {
	if err := p.acquireFor(ctx, person, nil, func() {}); err != nil {
		return nil, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			p.releaseLocked(person)
			p.signalLocked()
			p.mu.Unlock()
		})
	}, nil
}

// acquireFor reserves a slot of person's; self (nil for a Hold) is never
// evicted for it, and waiting is called once when the slot must be waited for.
func (p *Pool) acquireFor(ctx context.Context, person string, self *CLI, waiting func()) error {
	timer := time.NewTimer(p.cfg.SlotWait)
	defer timer.Stop()
	waited := false
	p.mu.Lock()
	p.waiters++
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.waiters--
		p.mu.Unlock()
	}()
	for {
		p.mu.Lock()
		full := p.cfg.Max > 0 && p.totalLocked() >= p.cfg.Max
		capped := p.cfg.MaxPerPerson > 0 && p.heldLocked(person) >= p.cfg.MaxPerPerson
		if !full && !capped {
			p.reserved[person]++
			p.mu.Unlock()
			return nil
		}
		// At their own cap a person gives up one of their own idle
		// processes; otherwise anyone's least recently used idle one goes.
		owner := ""
		if capped {
			owner = person
		}
		victims := p.idleLocked(self, owner)
		if len(victims) == 0 {
			// No idle session's process: one the warm pool started
			// goes, as it holds no conversation. Its slot passes to this
			// turn at once, and the turn's process starts once it is
			// gone; one still starting is waited for.
			if w := p.evictWarmLocked(owner); w != nil {
				p.reserved[person]++
				p.mu.Unlock()
				log := p.log.Info().Str("person", w.person)
				if self != nil {
					log = log.Str("session", self.ID())
				}
				log.Msg("stopped a waiting claude to free a slot")
				w.stop()
				return nil
			}
		}
		changed := p.changed
		p.mu.Unlock()

		if p.stopForRoom(victims, "a turn") {
			continue
		}
		if !waited {
			waited = true
			waiting()
		}
		select {
		case <-changed:
		case <-timer.C:
			if capped {
				return fmt.Errorf("%w (waited %s; at most %d per person)", ErrPersonBusy, p.cfg.SlotWait, p.cfg.MaxPerPerson)
			}
			return fmt.Errorf("%w (waited %s for one of %d)", ErrNoSlot, p.cfg.SlotWait, p.cfg.Max)
		case <-ctx.Done():
			return ctx.Err()
		case <-p.stop:
			return ErrNoSlot
		}
	}
}

// stopForRoom stops the process of the first of victims that is still
// idle, for what (a turn, a waiting process), and reports whether it did.
// It returns once the pool has forgotten the process, so the slot is free
// when the caller looks again.
func (p *Pool) stopForRoom(victims []*CLI, what string) bool {
	for _, v := range victims {
		proc := v.stopIdle()
		if proc == nil {
			continue
		}
		p.log.Info().Str("session", v.ID()).Str("for", what).Msg("stopped the least recently used idle claude to free a slot; its next turn resumes it")
		for {
			p.mu.Lock()
			_, counted := p.live[proc]
			changed := p.changed
			p.mu.Unlock()
			if !counted {
				return true
			}
			// The process is gone (Close returned), and the pool hears
			// of it from its reaper in a moment.
			select {
			case <-changed:
			case <-p.stop:
				return true
			}
		}
	}
	return false
}

// idleLocked lists sessions with a live, idle process (of owner's, unless
// owner is ""), least recently used first.
func (p *Pool) idleLocked(except *CLI, owner string) []*CLI {
	var out []*CLI
	for _, c := range p.live {
		if c != except && (owner == "" || c.Person() == owner) && c.State() == StateIdle {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].LastActivity().Before(out[j].LastActivity()) })
	return out
}

// latestLocked is person's most recently used session with a live
// process, or nil.
func (p *Pool) latestLocked(person string) *CLI {
	var latest *CLI
	for _, s := range p.live {
		if s.Person() == person && (latest == nil || s.LastActivity().After(latest.LastActivity())) {
			latest = s
		}
	}
	return latest
}

// unreserve gives back a reservation of c whose process never started.
func (p *Pool) unreserve(c *CLI) {
	p.mu.Lock()
	p.releaseLocked(c.Person())
	p.signalLocked()
	p.mu.Unlock()
}

// releaseLocked gives back a slot reserved for person. p.mu is held.
func (p *Pool) releaseLocked(person string) {
	if p.reserved[person]--; p.reserved[person] <= 0 {
		delete(p.reserved, person)
	}
}

// started turns a reservation into a live process.
func (p *Pool) started(proc *Process, c *CLI) {
	p.mu.Lock()
	p.releaseLocked(c.Person())
	p.live[proc] = c
	p.starts++
	p.mu.Unlock()
	p.recordPid(proc)
}

// Track records the process group pgid of a process the pool does not
// run itself (a terminal's claude; program is its executable, which
// /proc shows first on its command line) for CleanOrphans, as the
// sessions' processes are: a server that dies without ending it kills it
// when it starts again. forget removes the record once the group is
// gone.
func (p *Pool) Track(pgid int, program string) (forget func()) {
	p.recordGroup(pgid, program)
	return func() { p.forgetPid(pgid) }
}

// recordPid records a live process's group for CleanOrphans.
func (p *Pool) recordPid(proc *Process) { p.recordGroup(proc.Pid(), proc.cfg.Path) }

func (p *Pool) recordGroup(pgid int, program string) {
	if p.cfg.PIDDir != "" {
		_ = os.WriteFile(filepath.Join(p.cfg.PIDDir, strconv.Itoa(pgid)), []byte(program+"\n"), 0o600)
	}
}

func (p *Pool) forgetPid(pgid int) {
	if p.cfg.PIDDir != "" {
		_ = os.Remove(filepath.Join(p.cfg.PIDDir, strconv.Itoa(pgid)))
	}
}

// exited frees the slot of a process that is gone.
func (p *Pool) exited(proc *Process) {
	p.mu.Lock()
	delete(p.live, proc)
	for w := range p.warm {
		if w.proc == proc {
			delete(p.warm, w)
		}
	}
	p.signalLocked()
	p.mu.Unlock()
	p.forgetPid(proc.Pid())
}

// idle wakes the turns waiting for a slot when a session's turn has ended:
// its process may now be stopped for them.
func (p *Pool) idle() {
	p.mu.Lock()
	p.signalLocked()
	p.mu.Unlock()
}

func (p *Pool) signalLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *Pool) reap() {
	defer p.stopped.Done()
	tick := time.NewTicker(min(max(p.cfg.IdleTimeout/4, 10*time.Millisecond), 30*time.Second))
	defer tick.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-tick.C:
		}
		p.mu.Lock()
		var idle []*CLI
		for _, c := range p.live {
			if c.State() == StateIdle && time.Since(c.LastActivity()) >= p.cfg.IdleTimeout {
				idle = append(idle, c)
			}
		}
		p.mu.Unlock()
		for _, c := range idle {
			if c.StopIfIdle() {
				p.log.Info().Str("session", c.ID()).Dur("idle_ms", p.cfg.IdleTimeout).Msg("stopped an idle claude; the next turn resumes it")
			}
		}
	}
}

// noteRefusal reads why proc, a process of person's that exited while
// starting, refused to start; a refusal is logged with the managed
// setting behind it and kept for Refused. nil if it was no refusal. A nil
// Pool only reads.
func (p *Pool) noteRefusal(person string, proc *Process, log zerolog.Logger) *StartRefused {
	<-proc.Done()
	r := startRefusal(proc.StderrTail())
	if r == nil {
		return nil
	}
	log.Error().Str("person", person).Str("managed_setting", r.Setting).Str("reason", r.Reason).Str("detail", r.Detail).
		Msg("claude refused to start: the machine's Claude Code managed settings forbid what this person's sessions bring along (their configured MCP servers or skills)")
	if p != nil {
		p.mu.Lock()
		p.refused[person] = *r
		p.mu.Unlock()
	}
	return r
}

// noteStarted forgets person's refused start: one of theirs started.
func (p *Pool) noteStarted(person string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	delete(p.refused, person)
	p.mu.Unlock()
}

// Refused is, per person, the last start of theirs the CLI refused
// because of the machine's managed settings, while none of theirs has
// started since.
func (p *Pool) Refused() map[string]StartRefused {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.refused)
}

// Close stops the reaper and the warm pool, and every process still
// waiting for a session; the processes sessions hold are theirs to stop.
func (p *Pool) Close() {
	p.once.Do(func() { close(p.stop) })
	p.stopped.Wait()
	p.mu.Lock()
	var waiting []*warmProc
	for w := range p.warm {
		waiting = append(waiting, w)
		delete(p.warm, w)
	}
	p.mu.Unlock()
	for _, w := range waiting {
		w.stop()
	}
}

// Kill ends every process the pool knows at once, the sessions' and
// those waiting for one: SIGKILL to each group, for a shutdown whose time
// is up. Their sessions see them exit as after a crash.
func (p *Pool) Kill() {
	p.mu.Lock()
	procs := make([]*Process, 0, len(p.live)+len(p.warm))
	for proc := range p.live {
		procs = append(procs, proc)
	}
	for w := range p.warm {
		if w.proc != nil {
			procs = append(procs, w.proc)
		}
	}
	p.mu.Unlock()
	for _, proc := range procs {
		proc.Kill()
	}
}

// CleanOrphans kills the process groups a previous server recorded in
// pidDir and that still run the recorded binary, and forgets the records.
// Checking the command line keeps a reused pid from being killed.
func CleanOrphans(pidDir string, log zerolog.Logger) int {
	entries, err := os.ReadDir(pidDir)
	if err != nil {
		return 0
	}
	killed := 0
	for _, e := range entries {
		path := filepath.Join(pidDir, e.Name())
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 1 {
			_ = os.Remove(path)
			continue
		}
		want, _ := os.ReadFile(path)
		cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		bin := strings.TrimSpace(string(want))
		if err == nil && bin != "" && strings.HasPrefix(string(cmdline), bin) {
			if syscall.Kill(-pid, syscall.SIGKILL) == nil {
				killed++
				log.Warn().Int("pgid", pid).Msg("killed a claude process group left by a previous server")
			}
		}
		_ = os.Remove(path)
	}
	return killed
}
