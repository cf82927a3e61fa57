package relay_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/httpapi"
	"github.com/majorhq/major/internal/standin"
	"github.com/majorhq/major/relay"
	"github.com/majorhq/major/supervisor"
)

// Load test bounds: fixed counts, so the run is the same on every machine.
const (
	loadSessions = 50
	loadClients  = 2 // per session, on the events endpoint
	loadTurns    = 3
	loadDeltas   = 50
	// Events of one turn on the events stream: turn_start, system/init,
	// message_start, content_block_start, a cli and a text event per delta,
	// assistant, content_block_stop, message_delta, message_stop, result,
	// done.
	loadTurnEvents = 2*loadDeltas + 10
	loadHeapLimit  = 256 << 20
)

// received is one line a load client read.
type received struct {
	seq  int64
	typ  string
	line string
	lag  time.Duration // for stamped text deltas: stand-in write to client read
}

// loadClient reads one events stream until its context ends.
type loadClient struct {
	mu    sync.Mutex
	got   []received
	dones chan struct{} // one per done event
	err   error
}

func (c *loadClient) read(body io.Reader) {
	br := bufio.NewReaderSize(body, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			line = bytes.TrimSuffix(line, []byte("\n"))
			now := time.Now()
			var ev struct {
				Seq   int64  `json:"seq"`
				Type  string `json:"type"`
				Delta string `json:"delta"`
			}
			if jerr := json.Unmarshal(line, &ev); jerr != nil {
				c.fail(fmt.Errorf("line is not JSON: %q", line))
				return
			}
			if ev.Type == "ping" {
				continue
			}
			r := received{seq: ev.Seq, typ: ev.Type, line: string(line)}
			if ev.Type == "text" {
				stamp, _, _ := strings.Cut(ev.Delta, " ")
				if ns, perr := strconv.ParseInt(stamp, 10, 64); perr == nil {
					r.lag = now.Sub(time.Unix(0, ns))
				}
			}
			c.mu.Lock()
			c.got = append(c.got, r)
			c.mu.Unlock()
			if ev.Type == "done" {
				c.dones <- struct{}{}
			}
		}
		if err != nil {
			return
		}
	}
}

func (c *loadClient) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = err
	}
}

// TestLoadManySessions drives 50 sessions with two clients each through
// the real router and the stand-in CLI, and checks that every client sees
// every event exactly once and in order, that both clients of a session
// see the same stream, that each turn ends with one done, and that memory
// and goroutines come back down afterwards.
func TestLoadManySessions(t *testing.T) {
	bin := standin.Build(t)
	baseGoroutines := runtime.NumGoroutine()

	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	launch := relay.LauncherFunc(func(p relay.SessionParams) relay.CLI {
		return supervisor.NewCLI(supervisor.CLIConfig{
			ID: p.ID, Person: p.Person, Dir: t.TempDir(), CLISessionID: p.CLISessionID,
			Spec:   supervisor.Spec{Binary: bin, Env: []string{"PATH=/usr/bin:/bin"}, Grace: 2 * time.Second},
			Sink:   p.Sink,
			Logger: log,
		})
	})
	sessions, err := relay.NewRegistry(relay.RegistryConfig{Launcher: launch, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	auth, err := httpapi.NewAuth(map[string][]string{token: {"sebastian", "petra"}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	srv := httptest.NewServer(httpapi.NewServer(httpapi.Config{
		Auth: auth, Registry: sessions, Logger: log, Done: done,
	}))
	transport := &http.Transport{MaxIdleConnsPerHost: loadSessions * (loadClients + 1)}
	client := &http.Client{Transport: transport}
	var closeOnce sync.Once
	shutdown := func() {
		closeOnce.Do(func() {
			close(done)
			srv.Close()
			sessions.Close()
			transport.CloseIdleConnections()
		})
	}
	t.Cleanup(shutdown)

	call := func(ctx context.Context, method, path, body string) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, method, srv.URL+path, strings.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("X-Notes-Person", "sebastian")
		req.Header.Set("Content-Type", "application/json")
		return client.Do(req)
	}

	deadline, cancelAll := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancelAll()
	start := time.Now()
	type sessionRun struct {
		id      string
		clients []*loadClient
		err     error
	}
	runs := make([]*sessionRun, loadSessions)
	var wg sync.WaitGroup
	for i := range runs {
		run := &sessionRun{}
		runs[i] = run
		wg.Add(1)
		go func() {
			defer wg.Done()
			run.id, run.clients, run.err = runLoadSession(deadline, call)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)

	for i, run := range runs {
		if run.err != nil {
			t.Fatalf("session %d: %v", i, run.err)
		}
	}

	// Every client saw every event of its session once, in order, and the
	// same bytes the stream holds.
	var lags []time.Duration
	delivered := 0
	for i, run := range runs {
		chat, err := sessions.Get(run.id, "sebastian")
		if err != nil {
			t.Fatalf("session %d: %v", i, err)
		}
		logged := chat.Stream().Events(0)
		if len(logged) != loadTurns*loadTurnEvents {
			t.Fatalf("session %d: stream has %d events, want %d", i, len(logged), loadTurns*loadTurnEvents)
		}
		for c, cl := range run.clients {
			cl.mu.Lock()
			got := cl.got
			cl.mu.Unlock()
			if cl.err != nil {
				t.Fatalf("session %d client %d: %v", i, c, cl.err)
			}
			if len(got) != len(logged) {
				t.Fatalf("session %d client %d: %d events, want %d", i, c, len(got), len(logged))
			}
			turnDones, inTurn := 0, false
			for k, r := range got {
				if r.seq != int64(k+1) {
					t.Fatalf("session %d client %d: event %d has seq %d, want %d", i, c, k, r.seq, k+1)
				}
				if r.line != string(logged[k].Line) {
					t.Fatalf("session %d client %d: seq %d differs from the log", i, c, r.seq)
				}
				switch r.typ {
				case "turn_start":
					if inTurn {
						t.Fatalf("session %d client %d: turn started before the last one ended", i, c)
					}
					inTurn, turnDones = true, 0
				case "done":
					turnDones++
					if turnDones != 1 || !inTurn {
						t.Fatalf("session %d client %d: done at seq %d outside a turn or twice", i, c, r.seq)
					}
					inTurn = false
				case "error":
					t.Fatalf("session %d client %d: error event %s", i, c, r.line)
				}
				if r.lag > 0 {
					lags = append(lags, r.lag)
				}
			}
			if inTurn {
				t.Fatalf("session %d client %d: last turn has no done", i, c)
			}
			if c > 0 {
				prev := run.clients[0].got
				for k := range got {
					if got[k].line != prev[k].line {
						t.Fatalf("session %d: clients differ at seq %d", i, k+1)
					}
				}
			}
			delivered += len(got)
		}
	}
	if want := loadSessions * loadTurns * loadDeltas * loadClients; len(lags) != want {
		t.Fatalf("%d stamped text deltas arrived, want %d", len(lags), want)
	}

	shutdown()
	runs = nil
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	if ms.HeapInuse > loadHeapLimit {
		t.Errorf("heap in use after the run and GC: %d MiB, limit %d MiB", ms.HeapInuse>>20, loadHeapLimit>>20)
	}
	// Goroutines come back to where they were (a few of the HTTP
	// transport's may still be on their way out).
	var n int
	for wait := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if n = runtime.NumGoroutine(); n <= baseGoroutines+2 || time.Now().After(wait) {
			break
		}
	}
	if n > baseGoroutines+2 {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines after close, %d before:\n%s", n, baseGoroutines, buf[:runtime.Stack(buf, true)])
	}

	slices.Sort(lags)
	pct := func(p float64) time.Duration { return lags[int(float64(len(lags)-1)*p)] }
	t.Logf("load: %d sessions x %d clients x %d turns x %d deltas in %s: %d events logged, %d delivered (%.0f deliveries/s); "+
		"text delta latency stand-in to client p50 %s p99 %s max %s; heap in use after GC %d MiB (peak sys %d MiB); goroutines %d -> %d",
		loadSessions, loadClients, loadTurns, loadDeltas, elapsed.Round(time.Millisecond),
		loadSessions*loadTurns*loadTurnEvents, delivered, float64(delivered)/elapsed.Seconds(),
		pct(0.50).Round(time.Microsecond), pct(0.99).Round(time.Microsecond), lags[len(lags)-1].Round(time.Microsecond),
		ms.HeapInuse>>20, ms.Sys>>20, baseGoroutines, n)
}

// runLoadSession creates a session, attaches its clients and runs its
// turns one after the other, each to its done on every client. The
// clients' streams are closed when it returns.
func runLoadSession(ctx context.Context, call func(context.Context, string, string, string) (*http.Response, error),
) (id string, clients []*loadClient, err error) {
	resp, err := call(ctx, "POST", "/api/claude/sessions", "")
	if err != nil {
		return "", nil, fmt.Errorf("create: %w", err)
	}
	var info relay.SessionInfo
	err = json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusCreated {
		return "", nil, fmt.Errorf("create: status %d, %v", resp.StatusCode, err)
	}
	err = runLoadTurns(ctx, call, info.ID, &clients)
	return info.ID, clients, err
}

func runLoadTurns(ctx context.Context, call func(context.Context, string, string, string) (*http.Response, error),
	id string, clients *[]*loadClient) error {
	info := relay.SessionInfo{ID: id}

	streamCtx, stop := context.WithCancel(ctx)
	var readers sync.WaitGroup
	defer func() {
		stop()
		readers.Wait()
	}()
	for range loadClients {
		resp, err := call(streamCtx, "GET", "/api/claude/sessions/"+info.ID+"/events?after=0", "")
		if err != nil {
			return fmt.Errorf("attach: %w", err)
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return fmt.Errorf("attach: status %d", resp.StatusCode)
		}
		c := &loadClient{dones: make(chan struct{}, loadTurns)}
		*clients = append(*clients, c)
		readers.Add(1)
		go func() {
			defer readers.Done()
			defer resp.Body.Close()
			c.read(resp.Body)
		}()
	}

	for turn := range loadTurns {
		body := fmt.Sprintf(`{"message":"turn %d deltas:%d size:24 stamp:1"}`, turn, loadDeltas)
		resp, err := call(ctx, "POST", "/api/claude/sessions/"+info.ID+"/messages", body)
		if err != nil {
			return fmt.Errorf("turn %d: %w", turn, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			return fmt.Errorf("turn %d: status %d", turn, resp.StatusCode)
		}
		for k, c := range *clients {
			select {
			case <-c.dones:
			case <-ctx.Done():
				return fmt.Errorf("turn %d: client %d saw no done in time", turn, k)
			}
		}
	}
	return nil
}
