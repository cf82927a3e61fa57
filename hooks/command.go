package hooks

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/supervisor"
)

// The interactive CLI (a terminal) cannot call hooks back over stdio, so
// there every hook is a command: `major hook <callback id>`, which reads
// the hook input on stdin, hands it to the server over a unix socket in
// the state directory (Commands), and writes the server's answer, the same
// hook output JSON as a callback's, on stdout. The server answers it with
// the same Handle as the stream-json sessions' callbacks, in its own
// process, so the vault guard, the write leases against git syncs and the
// audit logs are the very same ones.

// CallbackTurnEnd is the command hook run when the terminal's model
// finishes answering (Stop): the turn's leases end and its changes are
// committed, as at the end of an app turn.
const CallbackTurnEnd = "turn_end"

// The environment of a terminal's CLI, which its hook commands inherit:
// where the server's hook socket is and the terminal's own token. Not
// MAJOR_*: no variable of the server's is passed into a sandbox.
const (
	SocketEnv = "HOOK_SOCKET"
	TokenEnv  = "HOOK_TOKEN"
)

// CommandSettings is the CLI settings file (for --settings) that runs
// command, plus the callback id as its last argument, for every hook in
// matchers, and for Stop with CallbackTurnEnd.
func CommandSettings(matchers map[string][]supervisor.HookMatcher, command []string) ([]byte, error) {
	if len(command) == 0 {
		return nil, errors.New("no hook command")
	}
	quoted := make([]string, len(command))
	for i, a := range command {
		quoted[i] = shellQuote(a)
	}
	base := strings.Join(quoted, " ")
	type hook struct {
		Type    string `json:"type"`
		Command string `json:"command"`
		Timeout int    `json:"timeout,omitempty"`
	}
	type group struct {
		Matcher string `json:"matcher,omitempty"`
		Hooks   []hook `json:"hooks"`
	}
	all := map[string][]group{}
	events := make([]string, 0, len(matchers))
	for ev := range matchers {
		events = append(events, ev)
	}
	sort.Strings(events)
	for _, ev := range events {
		for _, m := range matchers[ev] {
			g := group{Matcher: m.Matcher}
			for _, id := range m.HookCallbackIDs {
				g.Hooks = append(g.Hooks, hook{Type: "command", Command: base + " " + shellQuote(id), Timeout: m.Timeout})
			}
			all[ev] = append(all[ev], g)
		}
	}
	all["Stop"] = append(all["Stop"], group{Hooks: []hook{{Type: "command", Command: base + " " + CallbackTurnEnd, Timeout: 90}}})
	return json.MarshalIndent(map[string]any{"hooks": all}, "", "  ")
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// CommandConfig configures Commands.
type CommandConfig struct {
	// Socket is the unix socket's path, in the state directory.
	Socket string
	// Handle answers a hook, as for a callback (Hooks.Handle).
	Handle func(ctx context.Context, c Caller, req *supervisor.ControlRequest) (json.RawMessage, error)
	// TurnEnd ends the caller's turn: leases released, changes committed;
	// a status it returns is shown to the session's clients.
	TurnEnd func(ctx context.Context, person, sessionID string) string
	// InputTimeout bounds how long a hook input may take to arrive once
	// its headers are in; default DefaultInputTimeout.
	InputTimeout time.Duration
	Logger       zerolog.Logger
}

// Commands serves the hook commands of the terminals on a unix socket:
// each terminal registers its Caller and gets a token that its hook
// commands present.
type Commands struct {
	cfg CommandConfig
	log zerolog.Logger
	ln  net.Listener
	srv *http.Server
	wg  sync.WaitGroup

	mu      sync.Mutex
	callers map[string]Caller
	inputs  inputs
}

// ListenCommands starts serving hook commands on cfg.Socket (mode 0600;
// a stale socket file is replaced).
func ListenCommands(cfg CommandConfig) (*Commands, error) {
	if err := os.MkdirAll(filepath.Dir(cfg.Socket), 0o700); err != nil {
		return nil, fmt.Errorf("hook socket: %w", err)
	}
	_ = os.Remove(cfg.Socket)
	ln, err := net.Listen("unix", cfg.Socket)
	if err != nil {
		return nil, fmt.Errorf("hook socket: %w", err)
	}
	if err := os.Chmod(cfg.Socket, 0o600); err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("hook socket: %w", err)
	}
	if cfg.InputTimeout <= 0 {
		cfg.InputTimeout = DefaultInputTimeout
	}
	s := &Commands{cfg: cfg, log: cfg.Logger.With().Str("component", "hook-commands").Logger(), ln: ln, callers: map[string]Caller{},
		inputs: inputs{count: map[string]int{}, bytes: map[string]int64{}}}
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve), ReadHeaderTimeout: 10 * time.Second}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_ = s.srv.Serve(ln)
	}()
	return s, nil
}

// Socket is the socket's path, for SocketEnv.
func (s *Commands) Socket() string { return s.cfg.Socket }

// Register admits the hook commands of c's terminal: they present token
// (TokenEnv) until unregister is called.
func (s *Commands) Register(c Caller) (token string, unregister func()) {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	token = base64.RawURLEncoding.EncodeToString(b)
	s.mu.Lock()
	s.callers[token] = c
	s.mu.Unlock()
	return token, func() {
		s.mu.Lock()
		delete(s.callers, token)
		s.mu.Unlock()
	}
}

// Close stops serving and waits for the requests in flight.
func (s *Commands) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	s.wg.Wait()
	_ = os.Remove(s.cfg.Socket)
	return err
}

// SessionSeer is a Caller that wants the CLI conversation id each hook
// input names (a terminal keeps the id it should be resumed with).
type SessionSeer interface {
	SawSession(cliSessionID string)
}

func (s *Commands) serve(w http.ResponseWriter, r *http.Request) {
	id, ok := strings.CutPrefix(r.URL.Path, "/hook/")
	if r.Method != http.MethodPost || !ok || id == "" {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	s.mu.Lock()
	c := s.callers[token]
	s.mu.Unlock()
	if token == "" || c == nil {
		http.Error(w, "unknown terminal", http.StatusUnauthorized)
		return
	}
	leave, ok := s.enter(token)
	if !ok {
		s.log.Warn().Str("session", c.ID()).Int("limit", maxInputsPerTerminal).Msg("refused a hook input: the terminal has as many in as it may")
		w.Header().Set("Connection", "close")
		http.Error(w, "too many hook inputs of this terminal at once", http.StatusTooManyRequests)
		return
	}
	defer leave()
	input, give, err := s.readInput(w, r, token)
	if err != nil {
		s.inputError(w, c, err)
		return
	}
	defer give()
	var in supervisor.HookInput
	_ = json.Unmarshal(input, &in)
	if seer, ok := c.(SessionSeer); ok && in.SessionID != "" {
		seer.SawSession(in.SessionID)
	}
	var out json.RawMessage
	if id == CallbackTurnEnd {
		if s.cfg.TurnEnd != nil {
			if status := s.cfg.TurnEnd(r.Context(), c.Person(), c.ID()); status != "" {
				c.Notice(status)
			}
		}
		out = proceed()
	} else {
		out, err = s.cfg.Handle(r.Context(), c, &supervisor.ControlRequest{Subtype: "hook_callback", CallbackID: id, HookInput: input, ToolUseID: in.ToolUseID})
		if err != nil {
			s.log.Warn().Err(err).Str("session", c.ID()).Str("callback", id).Msg("hook command failed")
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

// RunCommand is `major hook <callback id>`: it passes the hook input on
// stdin to the server named by the environment and writes the answer on
// stdout. If the server cannot be asked, the vault guard denies the tool
// call (a guard that cannot run must not let a write through); any other
// hook reports the failure on stderr and lets the CLI go on.
func RunCommand(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) != 1 || args[0] == "" {
		return errors.New("usage: major hook <callback id> (run by the terminal's claude, hook input on stdin)")
	}
	id := args[0]
	out, err := askServer(ctx, id, getenv, stdin)
	if err != nil {
		fmt.Fprintln(stderr, "major hook:", err)
		if id == CallbackVaultGuard {
			_, werr := stdout.Write(deny("The vault guard could not check this tool call, so it was not made."))
			return werr
		}
		return err
	}
	_, err = stdout.Write(out)
	return err
}

func askServer(ctx context.Context, id string, getenv func(string) string, stdin io.Reader) ([]byte, error) {
	socket, token := getenv(SocketEnv), getenv(TokenEnv)
	if socket == "" || token == "" {
		return nil, fmt.Errorf("%s and %s are not set", SocketEnv, TokenEnv)
	}
	input, err := io.ReadAll(io.LimitReader(stdin, maxHookInput+1))
	if err != nil {
		return nil, fmt.Errorf("read hook input: %w", err)
	}
	if len(input) > maxHookInput {
		return nil, errInputTooLarge
	}
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://major/hook/"+id, bytes.NewReader(input))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("ask the server: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("read the server's answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the server answered %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return body, nil
}
