package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/assembly"
	"github.com/majorhq/major/clihome"
	sessionconfig "github.com/majorhq/major/config"
	"github.com/majorhq/major/gateway"
	"github.com/majorhq/major/hooks"
	"github.com/majorhq/major/httpapi"
	"github.com/majorhq/major/linkedin"
	"github.com/majorhq/major/mcpserver"
	"github.com/majorhq/major/readiness"
	"github.com/majorhq/major/relay"
	"github.com/majorhq/major/sandbox"
	"github.com/majorhq/major/sessionstore"
	"github.com/majorhq/major/supervisor"
	"github.com/majorhq/major/terminal"
	"github.com/majorhq/major/usage"
	"github.com/majorhq/major/vault"
	"github.com/majorhq/major/web"
)

// claudeVersion runs `claude --version` (for the start-up log and, cached,
// /readyz).
func claudeVersion(ctx context.Context, bin string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", bin, err)
	}
	return strings.TrimSpace(string(out)), nil
}

func serve(ctx context.Context, cfg config, log zerolog.Logger, stdout io.Writer) error {
	// Everything below stops by the end of it.
	down := newShutdown(cfg.ShutdownGrace)
	defer down.close()
	claude, err := findClaude(cfg.Claude)
	if err != nil {
		return err
	}
	// The binary itself, not a link to it: a sandbox holds the CLI's
	// install, not the folder of links it was found through.
	if claude, err = filepath.EvalSymlinks(claude); err != nil {
		return fmt.Errorf("--claude: %w", err)
	}
	version, err := claudeVersion(ctx, claude)
	if err != nil {
		return err
	}
	install, err := sandbox.InstallDir(claude)
	if err != nil {
		return err
	}
	auth, err := httpapi.LoadAuth(cfg.AuthFile)
	if err != nil {
		return err
	}
	vaultRoot, err := filepath.Abs(cfg.VaultRoot)
	if err != nil {
		return err
	}
	if st, err := os.Stat(vaultRoot); err != nil || !st.IsDir() {
		return fmt.Errorf("vault root %s is not a directory", vaultRoot)
	}
	if err := checkPersons(auth.Persons()); err != nil {
		return fmt.Errorf("auth file %s: %w", cfg.AuthFile, err)
	}
	stateInVault, err := checkStateDir(vaultRoot, cfg.StateDir)
	if err != nil {
		return err
	}
	if stateInVault != "" {
		if err := excludeFromGit(ctx, vaultRoot, stateInVault); err != nil {
			return fmt.Errorf("--state-dir %s is inside the vault repository and could not be excluded from git: %w", cfg.StateDir, err)
		}
	}
	if err := checkConfigDir(cfg.ConfigDir, cfg.StateDir); err != nil {
		return err
	}
	repository := vaultRepository(ctx, vaultRoot)
	rules := assembly.ConfigRules()
	rules.Notifications = notificationsRule
	settings, err := sessionconfig.Open(sessionconfig.Config{Dir: cfg.ConfigDir, Vault: repository,
		Rules: rules, Logger: log})
	if err != nil {
		return err
	}
	// Every person's CLI has a home of its own; what an earlier server
	// kept of their conversations in the one home all shared moves there.
	persons := auth.Persons()
	dirs := map[string]string{}
	for _, p := range persons {
		if _, err := clihome.Make(cfg.StateDir, p); err != nil {
			return err
		}
		dirs[p] = filepath.Join(vaultRoot, p)
	}
	if _, err := clihome.Migrate(clihome.SharedConfigDir(lookup(cfg.Environ)), cfg.StateDir, dirs, log); err != nil {
		log.Error().Err(err).Msg("some conversations of the shared CLI home could not be moved into their person's own; they do not resume until moved")
	}
	var box *sandbox.Sandbox
	unsandboxed := ""
	if cfg.Sandbox {
		// Never mounted, whatever a configuration names: the server's own
		// files and folders and its CLI configuration (its claude login,
		// the CLI home all persons shared before); nor its home whole.
		getenv := lookup(cfg.Environ)
		private := []string{vaultRoot, cfg.StateDir, cfg.ConfigDir, cfg.AuthFile, cfg.LinkedInConfig, cfg.Notify.FCMCredentials, clihome.SharedConfigDir(getenv)}
		box, err = sandbox.New(ctx, sandbox.Config{PATH: getenv("PATH"), Private: private, Homes: []string{getenv("HOME")}})
		if err != nil {
			return err
		}
		if box.Holds(install) {
			return fmt.Errorf("the CLI's install %s holds or is inside a folder of the server's (vault, state or configuration): every sandbox would see it; install the CLI elsewhere", install)
		}
	} else {
		unsandboxed = "the sandbox is off (--sandbox=off): the vault guard alone keeps each person's CLI in their folder; no shell is served"
		log.Warn().Msg("SANDBOX OFF: " + unsandboxed)
	}
	// The credential stays in this process: every CLI reaches the model
	// through the gateway, with a token of its own. Without a credential
	// there is no gateway, and turns fail as /readyz says.
	var sessions *relay.Registry
	var gw *gateway.Gateway
	modelURL := ""
	if cred, err := gateway.CredentialFromEnv(cfg.Environ); err != nil {
		log.Error().Err(err).Msg("no model gateway: the CLIs have no way to the model")
	} else {
		gw, err = gateway.New(gateway.Config{
			Upstream: lookup(cfg.Environ)("ANTHROPIC_BASE_URL"), Credential: cred, Logger: log,
			Admit: func(person, session string) error {
				if sessions == nil {
					return nil
				}
				return sessions.AdmitRequest(person, session)
			},
			Budgeted: func(person, session string) bool {
				return sessions != nil && sessions.Budgeted(person, session)
			},
			Refused: func(person, session string, err error) {
				if sessions != nil {
					sessions.Refused(person, session, err)
				}
			},
			Record: func(r gateway.Request) {
				if sessions != nil {
					sessions.Charge(r.Person, r.Session, r.Start, usage.Day{CostUSD: r.CostUSD,
						InputTokens: r.Usage.InputTokens, OutputTokens: r.Usage.OutputTokens,
						CacheReadInputTokens:     r.Usage.CacheReadInputTokens,
						CacheCreationInputTokens: r.Usage.CacheCreationInputTokens + r.Usage.CacheCreation1hInputTokens})
				}
			},
		})
		if err != nil {
			return err
		}
		if modelURL, err = gw.Listen("127.0.0.1:0"); err != nil {
			return err
		}
		// Closed last: the CLIs are gone by then.
		defer gw.Close()
	}
	childEnv := assembly.Environment(cfg.Environ, modelURL)
	// A missing or refused credential is found now, not by the first
	// person who writes; /readyz reports it (cached, so probes start no
	// process).
	ready := readiness.New(readiness.Config{
		Version: func(ctx context.Context) (string, error) { return claudeVersion(ctx, claude) },
		Env:     cfg.Environ,
		Logger:  log,
	})
	if _, err := ready.Check(ctx); err != nil {
		log.Error().Err(err).Msg("NOT READY: every turn will fail until this is fixed; /readyz answers 503")
	}

	git := vault.NewGitSync(vault.GitConfig{Root: vaultRoot, RemoteTimeout: cfg.GitRemoteTimeout, Logger: log})
	defer git.Close()
	accounts, err := linkedin.LoadConfig(cfg.LinkedInConfig)
	if err != nil {
		return err
	}
	if len(accounts) == 0 {
		log.Warn().Msg("LinkedIn is not configured (--linkedin-config): the LinkedIn tools will say so to the model")
	}
	auto := map[string]bool{}
	for _, p := range strings.Split(cfg.AutoPublish, ",") {
		if p = strings.TrimSpace(p); p != "" {
			auto[p] = true
		}
	}
	// Publishes whose outcome LinkedIn left open are kept in the state
	// directory, so a restart does not forget them (see Unconfirmed).
	unconfirmed, err := mcpserver.OpenUnconfirmed(filepath.Join(cfg.StateDir, "linkedin-unconfirmed.json"), nil)
	if err != nil {
		return err
	}
	// Whether a person publishes without asking is the launcher's
	// decision (configuration over flag), for /mcp as for the chat.
	var launcher *assembly.Launcher
	mcp := mcpserver.New(mcpserver.Config{
		LinkedIn:    linkedin.New(linkedin.Config{BaseURL: cfg.LinkedInAPI, Logger: log}),
		Accounts:    accounts,
		AutoPublish: func(person string) bool { return launcher.AutoPublish(person) },
		ActivityLog: vault.NewAuditLog(vaultRoot, git),
		Unconfirmed: unconfirmed,
		Logger:      log,
	})
	for p := range accounts {
		if err := checkPersons([]string{p}); err != nil {
			return fmt.Errorf("--linkedin-config: %w", err)
		}
	}
	for p := range auto {
		if err := checkPersons([]string{p}); err != nil {
			return fmt.Errorf("--linkedin-auto-publish: %w", err)
		}
	}
	pidDir := filepath.Join(cfg.StateDir, "pids")
	if n := supervisor.CleanOrphans(pidDir, log); n > 0 {
		log.Warn().Int("killed", n).Msg("cleaned up claude processes of a previous server")
	}
	pool := supervisor.NewPool(supervisor.PoolConfig{Max: cfg.MaxProcesses, MaxPerPerson: cfg.MaxPerPerson, IdleTimeout: cfg.IdleTimeout,
		SlotWait: cfg.SlotWait, PIDDir: pidDir, Logger: log})
	// A process still running when the shutdown's time is up is killed:
	// the sessions' stops and the warm pool's wait no longer.
	stopKill := down.onEnd(pool.Kill)
	defer func() {
		pool.Close()
		stopKill()
	}()
	hk := hooks.New(hooks.Config{VaultRoot: vaultRoot, Git: git, Logger: log})
	launcher = assembly.New(assembly.Config{Claude: claude, Env: childEnv, VaultRoot: vaultRoot,
		Install: install, Sandbox: box, Home: func(p string) string { return clihome.Home(cfg.StateDir, p) },
		Gateway:    gatewayOrNil(gw),
		AskTimeout: cfg.AskTimeout, StallTimeout: cfg.StallTimeout, AutoPublish: auto,
		Settings: settings, FilesDir: filepath.Join(cfg.StateDir, "session-config"),
		Hooks: hk, MCP: mcp, Pool: pool, Logger: log,
		// The same limits for everyone, from the flags.
		LimitsFor: func(string) assembly.Limits { return cfg.Limits }})
	// A turn's end (a chat's, a terminal's) commits and syncs the
	// person's changes; once a shutdown has begun it has until the
	// shutdown's hooks deadline, so the turn's clients still hear of it.
	endTurn := func(ctx context.Context, person, sessionID string) string {
		ctx, cancel := down.bound(ctx)
		defer cancel()
		return launcher.EndTurn(ctx, person, sessionID)
	}
	// New chats of the persons active lately start in processes started
	// ahead for them; Close stops those still waiting.
	pool.Warm(supervisor.WarmConfig{PerPerson: cfg.Warm, Launch: launcher.Warm})
	store, err := sessionstore.New(cfg.StateDir, log)
	if err != nil {
		return err
	}
	// The address is known before anything needs it: the notifications'
	// action buttons point at it unless --public-url says otherwise.
	ln, err := listen(ctx, cfg.Addr)
	if err != nil {
		return err
	}
	defer ln.Close()
	publicURL := cfg.Notify.PublicURL
	if publicURL == "" {
		publicURL = "http://" + ln.Addr().String()
		if host, _, _ := net.SplitHostPort(ln.Addr().String()); net.ParseIP(host).IsUnspecified() {
			log.Warn().Str("public_url", publicURL).Msg("the buttons of notifications point at an address no phone can reach; set --public-url")
		}
	}
	// Closed after the sessions (its Close is deferred before theirs),
	// which tell it of their turns until they close.
	notifier, err := startNotify(cfg.Notify, cfg.StateDir, cfg.AskTimeout, publicURL, settings, log)
	if err != nil {
		return err
	}
	defer notifier.Close()
	sessions, err = relay.NewRegistry(relay.RegistryConfig{Launcher: launcher, Store: store, TTL: cfg.SessionTTL, MaxPerPerson: cfg.SessionsPerPerson, Notifier: notifier,
		Metered:       gw != nil,
		LiveProcesses: pool.Live, WaitingProcesses: pool.Waiting, Active: pool.Touch, TurnEnd: endTurn,
		Limits: launcher.Limits, VetRewind: launcher.VetRewind, Rewinding: launcher.Rewinding, Rewound: launcher.Rewound,
		ServerPaths: serverPaths(vaultRoot, repository, cfg.StateDir, cfg.ConfigDir, claude, cfg.Environ, append(sandboxHomes(persons), install)...), Logger: log})
	if err != nil {
		return err
	}
	defer sessions.Close()

	// Closed before the sessions (deferred later): an ending terminal
	// hands its conversation back to its session.
	var terminals *terminalSet
	if box != nil {
		terminals, err = startTerminals(cfg, hk, launcher, pool, endTurn, log)
		if err != nil {
			return err
		}
	}
	if terminals != nil {
		defer terminals.Close()
	}

	// Old sessions expire while the server runs, not only at start.
	expiry := assembly.StartExpiry(ctx, assembly.ExpiryConfig{Sessions: sessions, Logger: log})
	defer expiry.Close()

	done := make(chan struct{})
	srvCfg := httpapi.Config{
		Auth:       auth,
		Registry:   sessions,
		Logger:     log,
		Metrics:    sessions.Metrics(),
		MCP:        mcp.HTTPHandler(),
		WithPerson: mcpserver.WithPerson,
		Ready:      ready.Check,
		// Configuration files broken since the start show in /readyz.
		ConfigProblems: func() int { return len(settings.Check()) },
		Done:           done,
		// Pages of these origins (llm.html served elsewhere) may call the API.
		CORSOrigins: cfg.CORSOrigins,
		Unsandboxed: unsandboxed,
		Notify:      notifier,
	}
	if terminals != nil {
		srvCfg.Terminals = terminals
	}
	srvCfg.Static = clientFiles{dir: http.FS(web.Files())}
	if cfg.WebDir != "" {
		// A development override: the client as it is on disk.
		srvCfg.Static = clientFiles{dir: http.Dir(cfg.WebDir)}
	}
	api := httpapi.NewServer(srvCfg)

	log.Info().Str("addr", "http://"+ln.Addr().String()).Str("claude", claude).Str("claude_version", version).
		Str("sandbox", map[bool]string{true: "on", false: "off"}[box != nil]).
		Str("public_url", publicURL).Str("vault_root", vaultRoot).Str("state_dir", cfg.StateDir).Str("config_dir", cfg.ConfigDir).Msg("major is serving")
	return serveHTTP(ctx, ln, api, cfg.ReadTimeout, cfg.KeepAlive, down, func() {
		// Running turns are interrupted and end with their terminal
		// events while their clients are still connected, and the
		// terminals end (hung up, killed at the hooks' deadline); then
		// streams close and the HTTP server drains.
		log.Info().Dur("grace", cfg.ShutdownGrace).Msg("shutting down: interrupting running turns")
		var wg sync.WaitGroup
		wg.Go(func() { sessions.Shutdown(down.turns) })
		if terminals != nil {
			wg.Go(func() { terminals.Shutdown(down.hooks) })
		}
		wg.Wait()
		close(done)
	})
}

// sandboxHomes are where the persons' sandboxes see their CLI homes
// (assembly): paths of the server's, as clients must not see them.
func sandboxHomes(persons []string) []string {
	var out []string
	for _, p := range persons {
		out = append(out, assembly.SandboxHome(p))
	}
	return out
}

// gatewayOrNil is gw as the launcher's Gateway: a nil interface, not a
// nil pointer in one, when there is none.
func gatewayOrNil(gw *gateway.Gateway) assembly.Gateway {
	if gw == nil {
		return nil
	}
	return gw
}

// startTerminals serves the terminals' hook commands on a socket in the
// state directory and writes the settings file that makes the terminal's
// claude run them (`major hook <id>`, this binary): both outside every
// vault. A socket that cannot be made (its path too long for a unix
// socket) leaves the server without terminals, and says so.
func startTerminals(cfg config, hk *hooks.Hooks, launcher *assembly.Launcher, pool *supervisor.Pool,
	endTurn func(ctx context.Context, person, sessionID string) string, log zerolog.Logger) (*terminalSet, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find the major binary for the terminals' hooks: %w", err)
	}
	settings, err := hooks.CommandSettings(hk.Matchers(), []string{exe, "hook"})
	if err != nil {
		return nil, err
	}
	settingsPath := filepath.Join(cfg.StateDir, "terminal-settings.json")
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(settingsPath, settings, 0o600); err != nil {
		return nil, fmt.Errorf("write the terminals' settings: %w", err)
	}
	cmds, err := hooks.ListenCommands(hooks.CommandConfig{Socket: filepath.Join(cfg.StateDir, "hooks.sock"),
		Handle: hk.Handle, TurnEnd: endTurn, Logger: log})
	if err != nil {
		log.Error().Err(err).Msg("terminals are not available")
		return nil, nil
	}
	hookWiring := assembly.TerminalHooks{Settings: settingsPath, Program: exe, Socket: cmds.Socket()}
	mgr := terminal.NewManager(terminal.Config{
		Launch: func(person, session, resume, newID string) (terminal.Launch, error) {
			l, err := launcher.Terminal(person, session, hookWiring, resume, newID)
			if err != nil {
				return terminal.Launch{}, err
			}
			return terminal.Launch{Argv: l.Argv, Env: l.Env, Home: launcher.HostHome(person), Sandboxed: l.Sandboxed, Done: l.Credential.Revoke}, nil
		},
		Dir: launcher.Dir, Commands: cmds, Ended: endTurn, Pool: pool,
		Grace: cfg.TerminalGrace, Logger: log,
	})
	return &terminalSet{Manager: mgr, cmds: cmds}, nil
}

// terminalSet is the terminals and their hook socket, closed together.
type terminalSet struct {
	*terminal.Manager
	cmds *hooks.Commands
}

func (t *terminalSet) Close() {
	t.Manager.Close()
	_ = t.cmds.Close()
}
