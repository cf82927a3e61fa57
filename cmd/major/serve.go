package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/majorhq/major/assembly"
	"github.com/majorhq/major/attachments"
	"github.com/majorhq/major/auth"
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
	"github.com/majorhq/major/tracing"
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
	// The token file is read again whenever it changes (a token added,
	// revoked, a device paired), without a restart.
	tokens, err := auth.Open(auth.Config{Path: cfg.AuthFile, Logger: log})
	if err != nil {
		return err
	}
	defer tokens.Close()
	vaultRoot, err := filepath.Abs(cfg.VaultRoot)
	if err != nil {
		return err
	}
	if st, err := os.Stat(vaultRoot); err != nil || !st.IsDir() {
		return fmt.Errorf("vault root %s is not a directory", vaultRoot)
	}
	if err := checkPersons(tokens.Persons()); err != nil {
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
	persons := tokens.Persons()
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
		box, err = sandbox.New(ctx, sandbox.Config{PATH: getenv("PATH"), ManagedSettings: cfg.ManagedSettings, Private: private, Homes: []string{getenv("HOME")},
			Limits: cfg.SandboxLimits, Name: cfg.StateDir})
		if err != nil {
			return err
		}
		defer box.Close()
		if box.Holds(install) {
			return fmt.Errorf("the CLI's install %s holds or is inside a folder of the server's (vault, state or configuration): every sandbox would see it; install the CLI elsewhere", install)
		}
	} else {
		unsandboxed = "the sandbox is off (--sandbox=off): the vault guard alone keeps each person's CLI in their folder; no shell is served"
		log.Warn().Msg("SANDBOX OFF: " + unsandboxed)
	}
	// One trace per turn, exported by OTLP when the environment names
	// where to. Flushed last of all (deferred first): the turns have ended.
	var turns *tracing.Turns
	tracer, stopTracing, err := setupTracing(lookup(cfg.Environ), version)
	if err != nil {
		return err
	}
	if tracer != nil {
		turns = tracing.New(tracing.Config{Tracer: tracer, Content: cfg.TraceContent})
		defer func() {
			turns.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := stopTracing(ctx); err != nil {
				log.Warn().Err(err).Msg("the last traces could not be exported")
			}
		}()
		log.Info().Bool("content", cfg.TraceContent).Msg("tracing turns to the OTLP endpoint")
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
				if turns != nil {
					turns.Model(tracing.ModelRequest{Session: r.Session, Person: r.Person, Model: r.Model, Status: r.Status,
						Start: r.Start, Duration: r.Duration, InputTokens: r.Usage.InputTokens, OutputTokens: r.Usage.OutputTokens, CostUSD: r.CostUSD})
				}
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
	secure, err := setupTLS(cfg, log)
	if err != nil {
		return err
	}
	ln, err := listen(ctx, cfg.Addr)
	if err != nil {
		return err
	}
	defer ln.Close()
	scheme := "http"
	if secure != nil {
		scheme = "https"
	}
	publicURL := cfg.Notify.PublicURL
	if publicURL == "" {
		publicURL = scheme + "://" + ln.Addr().String()
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
	var observer relay.TurnObserver
	if turns != nil {
		observer = turns
	}
	sessions, err = relay.NewRegistry(relay.RegistryConfig{Launcher: launcher, Store: store, TTL: cfg.SessionTTL, MaxPerPerson: cfg.SessionsPerPerson, Notifier: notifier,
		Turns:         observer,
		Metered:       gw != nil,
		LiveProcesses: pool.Live, WaitingProcesses: pool.Waiting, Active: pool.Touch, TurnEnd: endTurn,
		Limits: launcher.Limits, VetRewind: launcher.VetRewind, Rewinding: launcher.Rewinding, Rewound: launcher.Rewound,
		Commits: git, Wrote: hk.Wrote,
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

	// /metrics: the relay's series, the HTTP API's, the Go runtime's and
	// the process's.
	metrics := prometheus.NewRegistry()
	metrics.MustRegister(sessions.Metrics(), collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	done := make(chan struct{})
	srvCfg := httpapi.Config{
		Auth:           tokens,
		Registry:       sessions,
		Logger:         log,
		Metrics:        promhttp.HandlerFor(metrics, promhttp.HandlerOpts{ErrorLog: promLog{log}}),
		Registerer:     metrics,
		TrustedProxies: cfg.TrustedProxies,
		MCP:            mcp.HTTPHandler(),
		WithPerson:     mcpserver.WithPerson,
		Ready:          ready.Check,
		// Configuration files broken since the start show in /readyz.
		ConfigProblems: func() int { return len(settings.Check()) },
		// So do the persons whose chats the machine's policy refuses.
		StartRefused: func() string { return startRefused(pool.Refused()) },
		Done:         done,
		// Pages of these origins (llm.html served elsewhere) may call the API.
		CORSOrigins: cfg.CORSOrigins,
		Unsandboxed: unsandboxed,
		// Files and notes a message carries, and the notes read back.
		Attachments: attachments.New(attachments.Config{VaultRoot: vaultRoot, Limits: cfg.Attachments, Writes: git}),
		Vault:       &vault.Guard{VaultRoot: vaultRoot},
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

	var tlsConfig *tls.Config
	if secure != nil {
		tlsConfig = secure.config
		if secure.challenge != nil {
			cl, err := listen(ctx, secure.challengeAddr)
			if err != nil {
				ln.Close()
				return fmt.Errorf("--acme-http-addr: %w", err)
			}
			defer serveChallenge(cl, secure.challenge, log)()
		}
	} else if !loopback(ln.Addr().String()) {
		log.Warn().Str("addr", ln.Addr().String()).Msg("PLAIN HTTP on an address other hosts can reach: tokens and messages cross the network readable; serve HTTPS (--tls-cert/--tls-key or --acme-domain) or put a TLS proxy in front and listen on loopback (see the README, On the internet)")
	}
	log.Info().Str("addr", scheme+"://"+ln.Addr().String()).Str("claude", claude).Str("claude_version", version).
		Str("sandbox", map[bool]string{true: "on", false: "off"}[box != nil]).
		Str("public_url", publicURL).Str("vault_root", vaultRoot).Str("state_dir", cfg.StateDir).Str("config_dir", cfg.ConfigDir).Msg("major is serving")
	return serveHTTP(ctx, ln, tlsConfig, debugLog(log), api, cfg.ReadTimeout, cfg.KeepAlive, down, func() {
		// Running turns are interrupted and end with their terminal
		// events while their clients are still connected, and the
		// terminals end (hung up, killed at the hooks' deadline); then
		// streams close and the HTTP server drains.
		log.Info().Dur("grace_ms", cfg.ShutdownGrace).Msg("shutting down: interrupting running turns")
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

// startRefused is /readyz's sentence for the persons whose last start the
// CLI refused (naming the managed settings, not the persons); "" if none.
func startRefused(refused map[string]supervisor.StartRefused) string {
	if len(refused) == 0 {
		return ""
	}
	var settings []string
	for _, r := range refused {
		if !slices.Contains(settings, r.Setting) {
			settings = append(settings, r.Setting)
		}
	}
	slices.Sort(settings)
	who := "1 person"
	if len(refused) > 1 {
		who = fmt.Sprintf("%d persons", len(refused))
	}
	return fmt.Sprintf("the machine's Claude Code managed settings (%s) refuse to start the chats of %s: the MCP servers or skills their configuration gives them are not allowed",
		strings.Join(settings, ", "), who)
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

// promLog is where the metrics handler reports a series it could not
// gather.
type promLog struct{ log zerolog.Logger }

func (p promLog) Println(v ...any) { p.log.Error().Msg(fmt.Sprint(v...)) }
