// Command major serves the Claude Code CLI to the notes app's clients: one
// long-lived claude process per chat session, in the person's vault, behind
// a small HTTP API.
//
//	major serve [flags]
//	major token add|list|revoke --auth-file FILE ...
//	major backup [--state-dir DIR] DEST
//	major person export|import|list ...
//
// `major hook <callback id>` is run by a terminal's claude for each of its
// hooks (see package hooks); people do not run it.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	stdlog "log"
	"math"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/attachments"
	"github.com/majorhq/major/hooks"
	"github.com/majorhq/major/httpapi"
	"github.com/majorhq/major/notify"
	"github.com/majorhq/major/relay"
	"github.com/majorhq/major/sandbox"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) > 1 && os.Args[1] == "hook" {
		os.Exit(hook(ctx, os.Args[2:]))
	}
	if err := run(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "major:", err)
		os.Exit(1)
	}
}

// hook is `major hook <callback id>`: the hook input on stdin goes to the
// server, its answer to stdout.
func hook(ctx context.Context, args []string) int {
	if err := hooks.RunCommand(ctx, args, os.Getenv, os.Stdin, os.Stdout, os.Stderr); err != nil {
		return 1
	}
	return 0
}

// config is everything the server is started with.
type config struct {
	Addr           string
	VaultRoot      string
	StateDir       string
	ConfigDir      string
	Claude         string
	AuthFile       string
	LinkedInAPI    string
	LinkedInConfig string
	AutoPublish    string
	LogLevel       string
	AskTimeout     time.Duration
	StallTimeout   time.Duration
	ShutdownGrace  time.Duration
	// GitRemoteTimeout bounds each pull and push of the vault.
	GitRemoteTimeout time.Duration
	MaxProcesses     int
	// MaxPerPerson bounds one person's processes; 0 until parseFlags
	// applies the default, half of MaxProcesses rounded up.
	MaxPerPerson int
	IdleTimeout  time.Duration
	// Warm is how many started processes wait for each recently active
	// person's next new chat.
	Warm     int
	SlotWait time.Duration
	// TerminalGrace keeps a terminal without a client alive this long.
	TerminalGrace time.Duration
	SessionTTL    time.Duration
	// SessionsPerPerson bounds the sessions one person keeps.
	SessionsPerPerson int
	// ReadTimeout bounds reading a request (headers and body);
	// KeepAlive bounds an idle connection between requests.
	ReadTimeout time.Duration
	KeepAlive   time.Duration
	WebDir      string
	CORSOrigins []string
	// Limits are every person's budgets and turn bound (0: none).
	Limits relay.Limits
	// Attachments bound the files a message carries and its attached
	// notes.
	Attachments attachments.Limits
	// Sandbox runs every CLI in a bubblewrap sandbox of its person's
	// (--sandbox=on, the default); SandboxLimits bound each person's
	// (FileSize in MiB until parseFlags makes it bytes).
	Sandbox       bool
	SandboxLimits sandbox.Limits
	// ManagedSettings is the folder of the machine's Claude Code managed
	// settings, which every sandbox holds where the CLI reads them.
	ManagedSettings string
	// Notify configures the notifications (see package notify).
	Notify notifyFlags
	// Environ is the server's environment (KEY=value); the CLI's starts
	// from it.
	Environ []string
	// TLSCert and TLSKey serve HTTPS from files (read again when they
	// change); ACMEDomains get certificates from an ACME CA instead.
	TLSCert, TLSKey string
	ACMEDomains     []string
	ACMEEmail       string
	// ACMEHTTPAddr serves ACME's HTTP-01 challenge; ACMEDirectory is the
	// CA's directory URL (Let's Encrypt when empty).
	ACMEHTTPAddr  string
	ACMEDirectory string
	// ACMEDirectoryCA is a PEM file of the CA certificates the ACME
	// directory's own HTTPS is checked against, beside the system's.
	ACMEDirectoryCA string
	// TrustedProxies are the peers whose X-Forwarded-For is believed.
	TrustedProxies []netip.Prefix
	// TraceContent puts message text in trace spans.
	TraceContent bool
}

// lookup is getenv over an environment list; the last value of a key wins,
// as in os.Getenv.
func lookup(environ []string) func(string) string {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return func(k string) string { return m[k] }
}

// envName is the environment variable that stands in for a flag left off
// the command line: --max-processes is MAJOR_MAX_PROCESSES.
func envName(flagName string) string {
	return "MAJOR_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// setFromEnv gives every flag not on the command line its environment
// value, parsed as the flag parses it: a bad value is an error naming the
// variable, never silently the default.
func setFromEnv(fs *flag.FlagSet, getenv func(string) string) error {
	onCommandLine := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { onCommandLine[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		v := getenv(envName(f.Name))
		if v == "" || onCommandLine[f.Name] {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: not a valid value for --%s", envName(f.Name), v, f.Name))
		}
	})
	return errors.Join(errs...)
}

func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("major serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.Addr, "addr", "127.0.0.1:8080", "address to listen on (MAJOR_ADDR)")
	fs.StringVar(&c.VaultRoot, "vault-root", "", "git repository holding one folder per person (MAJOR_VAULT_ROOT)")
	fs.StringVar(&c.StateDir, "state-dir", "", "where sessions and event logs are kept, outside every person's folder (MAJOR_STATE_DIR; default $XDG_STATE_HOME/major or ~/.local/state/major)")
	fs.StringVar(&c.ConfigDir, "config-dir", "", "the server's and each person's session configuration, outside the vault (MAJOR_CONFIG_DIR; default $XDG_CONFIG_HOME/major or ~/.config/major)")
	fs.StringVar(&c.Claude, "claude", "", "claude binary (MAJOR_CLAUDE; default: the project's pinned install, then claude on PATH)")
	fs.StringVar(&c.AuthFile, "auth-file", "", `JSON {"tokens": {"<token>": ["person", ...]}} (MAJOR_AUTH_FILE)`)
	fs.StringVar(&c.LinkedInAPI, "linkedin-api", "https://api.linkedin.com", "LinkedIn REST API base URL (MAJOR_LINKEDIN_API)")
	fs.StringVar(&c.LinkedInConfig, "linkedin-config", "", "JSON of LinkedIn access token and author per person (MAJOR_LINKEDIN_CONFIG)")
	fs.StringVar(&c.AutoPublish, "linkedin-auto-publish", "", "comma-separated persons whose LinkedIn posts, comments and replies run without asking (MAJOR_LINKEDIN_AUTO_PUBLISH)")
	fs.StringVar(&c.LogLevel, "log-level", "info", "debug, info, warn or error (MAJOR_LOG_LEVEL)")
	fs.DurationVar(&c.AskTimeout, "ask-timeout", relay.DefaultAskTimeout, "how long a question or permission prompt waits (MAJOR_ASK_TIMEOUT)")
	fs.DurationVar(&c.StallTimeout, "stall-timeout", 10*time.Minute, "kill a claude that writes nothing this long during a turn (MAJOR_STALL_TIMEOUT)")
	fs.DurationVar(&c.ShutdownGrace, "shutdown-grace", 10*time.Second, "how long shutdown takes at most: turns are interrupted and end, their commits are cut off at half of it, every process is gone by its end (MAJOR_SHUTDOWN_GRACE)")
	fs.DurationVar(&c.GitRemoteTimeout, "git-remote-timeout", 20*time.Second, "how long each pull and push of the vault's repository may take; a remote that does not answer in time is tried again with the next change (MAJOR_GIT_REMOTE_TIMEOUT)")
	fs.IntVar(&c.MaxProcesses, "max-processes", 8, "most claude processes alive at once, about 200 MB each (MAJOR_MAX_PROCESSES; 0: no limit)")
	fs.IntVar(&c.MaxPerPerson, "max-processes-per-person", 0, "most claude processes one person's chats hold at once, so others always get one (MAJOR_MAX_PROCESSES_PER_PERSON; default: half of --max-processes, rounded up)")
	fs.DurationVar(&c.IdleTimeout, "idle-timeout", 15*time.Minute, "stop a session's claude after this long idle; the next message resumes it (MAJOR_IDLE_TIMEOUT)")
	fs.IntVar(&c.Warm, "warm-processes", 1, "claude processes started ahead for each recently active person's next new chat, the first in an idle chat's slot if need be (MAJOR_WARM_PROCESSES; 0: none)")
	fs.DurationVar(&c.SlotWait, "slot-wait", 30*time.Second, "how long a message waits for a free claude slot before 503 (MAJOR_SLOT_WAIT)")
	fs.DurationVar(&c.TerminalGrace, "terminal-grace", 5*time.Minute, "keep a terminal whose client went away alive this long for it to come back (MAJOR_TERMINAL_GRACE)")
	fs.DurationVar(&c.SessionTTL, "session-ttl", 30*24*time.Hour, "forget sessions idle for longer (MAJOR_SESSION_TTL; 0: keep forever)")
	fs.IntVar(&c.SessionsPerPerson, "max-sessions-per-person", 200, "most chat sessions one person keeps; a new one beyond gets 429 (MAJOR_MAX_SESSIONS_PER_PERSON; 0: no limit)")
	fs.DurationVar(&c.ReadTimeout, "http-read-timeout", 30*time.Second, "how long a client may take to send a request, body included; never limits a streamed answer (MAJOR_HTTP_READ_TIMEOUT)")
	fs.DurationVar(&c.KeepAlive, "http-idle-timeout", 2*time.Minute, "close a kept-alive connection idle this long between requests (MAJOR_HTTP_IDLE_TIMEOUT)")
	fs.StringVar(&c.WebDir, "web-dir", "", "development override: serve the web client at /app from this folder instead of the copy built into the binary (MAJOR_WEB_DIR)")
	fs.Float64Var(&c.Limits.SessionUSD, "max-budget-usd-session", 0, "most one chat session may spend, in USD; a message beyond is refused (MAJOR_MAX_BUDGET_USD_SESSION; 0: no limit)")
	fs.Float64Var(&c.Limits.PersonDayUSD, "max-budget-usd-day", 0, "most one person's chats may spend per day (UTC), in USD (MAJOR_MAX_BUDGET_USD_DAY; 0: no limit)")
	fs.IntVar(&c.Limits.MaxTurns, "max-turns", 0, "most agent turns one message may take (MAJOR_MAX_TURNS; 0: no limit)")
	fileMiB := fs.Int("attachment-max-file-mb", 20, "most MiB one file a message carries may have; larger is refused with 413 (MAJOR_ATTACHMENT_MAX_FILE_MB)")
	fs.IntVar(&c.Attachments.Files, "attachment-max-files", 10, "most files one message may carry (MAJOR_ATTACHMENT_MAX_FILES)")
	messageMiB := fs.Int("attachment-max-message-mb", 50, "most MiB the files of one message may have together (MAJOR_ATTACHMENT_MAX_MESSAGE_MB)")
	fs.IntVar(&c.Attachments.ImageEdge, "attachment-image-edge", 2000, "longest side in pixels of an image the model is sent; a larger one is scaled down, the original kept (MAJOR_ATTACHMENT_IMAGE_EDGE)")
	noteKiB := fs.Int("attach-note-max-kb", 100, "most KiB of one attached note (or text file) the model is sent; a longer one is cut with a line saying so (MAJOR_ATTACH_NOTE_MAX_KB)")
	fs.Int64Var(&c.SandboxLimits.FileSize, "sandbox-max-file-mb", sandbox.DefaultLimits.FileSize>>20, "largest file, in MiB, a sandbox may write (MAJOR_SANDBOX_MAX_FILE_MB; 0: no limit)")
	fs.IntVar(&c.SandboxLimits.Processes, "sandbox-max-processes", sandbox.DefaultLimits.Processes, "most processes (threads counted) one person's sandboxes may run together, through a pids cgroup (MAJOR_SANDBOX_MAX_PROCESSES; 0: no limit)")
	sandboxMode := fs.String("sandbox", "on", "on: every claude, and all it starts, runs in a bubblewrap sandbox of its person's; off: without it, the vault guard is the only boundary and the terminal is refused (MAJOR_SANDBOX)")
	fs.StringVar(&c.ManagedSettings, "claude-managed-settings", sandbox.ManagedSettingsDir, "the machine's Claude Code managed settings folder (its policy for every claude), read-only in every sandbox at "+sandbox.ManagedSettingsDir+" (MAJOR_CLAUDE_MANAGED_SETTINGS)")
	fs.StringVar(&c.TLSCert, "tls-cert", "", "serve HTTPS with this certificate (PEM, the chain after it), read again when it changes (MAJOR_TLS_CERT)")
	fs.StringVar(&c.TLSKey, "tls-key", "", "the private key of --tls-cert (PEM) (MAJOR_TLS_KEY)")
	acmeDomains := fs.String("acme-domain", "", "comma-separated domain names to get HTTPS certificates for from Let's Encrypt, renewed by the server; needs :80 and :443 reachable (MAJOR_ACME_DOMAIN)")
	fs.StringVar(&c.ACMEEmail, "acme-email", "", "the address the ACME CA writes to about the certificates (MAJOR_ACME_EMAIL)")
	fs.StringVar(&c.ACMEHTTPAddr, "acme-http-addr", ":80", "where ACME's HTTP-01 challenge is answered, and plain HTTP redirected to HTTPS (MAJOR_ACME_HTTP_ADDR)")
	fs.StringVar(&c.ACMEDirectory, "acme-directory", "", "the ACME CA's directory URL (MAJOR_ACME_DIRECTORY; default Let's Encrypt)")
	fs.StringVar(&c.ACMEDirectoryCA, "acme-directory-ca", "", "PEM file of the CA that signed the ACME directory's HTTPS certificate, for a private ACME CA, trusted beside the system's (MAJOR_ACME_DIRECTORY_CA)")
	trustedProxies := fs.String("trusted-proxies", "", "comma-separated addresses or networks (CIDR) of reverse proxies whose X-Forwarded-For names the client, for logs and the failed sign-in limit (MAJOR_TRUSTED_PROXIES; default none)")
	fs.BoolVar(&c.TraceContent, "trace-content", false, "put the messages' text in the trace spans exported to OTEL_EXPORTER_OTLP_ENDPOINT (MAJOR_TRACE_CONTENT; default: sizes only)")
	corsOrigins := fs.String("cors-origins", "", "comma-separated browser origins (https://host[:port]) whose pages may call the API (MAJOR_CORS_ORIGINS; default none)")
	n := &c.Notify
	fs.DurationVar(&n.After, "notify-after", notify.DefaultNotifyAfter, "how long a question, permission or draft waits with nobody watching its chat before the person's devices are notified (MAJOR_NOTIFY_AFTER)")
	fs.StringVar(&n.PublicURL, "public-url", "", "the server's address as phones and push services reach it (https://host[:port]); notifications' action buttons point there (MAJOR_PUBLIC_URL; default http://<the address it listens on>)")
	pushAllow := fs.String("push-allow-hosts", "", "comma-separated hosts (host or host:port) a device URL may name besides public https ones, plain http allowed: a self-hosted ntfy on loopback, tests (MAJOR_PUSH_ALLOW_HOSTS; default none)")
	fs.StringVar(&n.Contact, "push-contact", notify.DefaultContact, "who push services may write to about this server's Web Push (mailto: address or https URL) (MAJOR_PUSH_CONTACT)")
	fs.StringVar(&n.NtfyContent, "ntfy-content", notify.ContentSummary, "what ntfy notifications carry: summary (no text of the chat, only that Major needs an answer in it) or full (MAJOR_NTFY_CONTENT)")
	fs.StringVar(&n.FCMCredentials, "fcm-credentials", "", "a Firebase service account key file (JSON): the Android app's devices get FCM notifications (MAJOR_FCM_CREDENTIALS; default none: no FCM)")
	fs.StringVar(&n.FCMEndpoint, "fcm-endpoint", notify.DefaultFCMEndpoint, "where FCM HTTP v1 messages go (MAJOR_FCM_ENDPOINT; for tests)")
	fs.StringVar(&n.FCMContent, "fcm-content", notify.ContentSummary, "what FCM notifications carry: summary or full, as --ntfy-content (MAJOR_FCM_CONTENT)")
	err := fs.Parse(args)
	if err != nil {
		return c, err
	}
	if err := setFromEnv(fs, getenv); err != nil {
		return c, err
	}
	addrGiven := false
	fs.Visit(func(f *flag.Flag) { addrGiven = addrGiven || f.Name == "addr" })
	addrGiven = addrGiven || getenv("MAJOR_ADDR") != ""
	if c.TrustedProxies, err = httpapi.ParseTrustedProxies(*trustedProxies); err != nil {
		return c, fmt.Errorf("--trusted-proxies (MAJOR_TRUSTED_PROXIES): %w", err)
	}
	for _, d := range strings.Split(*acmeDomains, ",") {
		if d = strings.TrimSpace(d); d != "" {
			c.ACMEDomains = append(c.ACMEDomains, d)
		}
	}
	switch {
	case (c.TLSCert == "") != (c.TLSKey == ""):
		return c, errors.New("--tls-cert (MAJOR_TLS_CERT) and --tls-key (MAJOR_TLS_KEY) go together")
	case c.TLSCert != "" && len(c.ACMEDomains) > 0:
		return c, errors.New("--tls-cert and --acme-domain exclude each other: certificates come from files or from ACME")
	case len(c.ACMEDomains) > 0 && !addrGiven:
		// Certificates for a domain are for its HTTPS port.
		c.Addr = ":443"
	}
	origins, err := httpapi.ParseOrigins(*corsOrigins)
	if err != nil {
		return c, fmt.Errorf("--cors-origins (MAJOR_CORS_ORIGINS): %w", err)
	}
	c.CORSOrigins = origins
	if err := c.Notify.parse(*pushAllow); err != nil {
		return c, err
	}
	if c.SandboxLimits.FileSize < 0 || c.SandboxLimits.Processes < 0 {
		return c, errors.New("--sandbox-max-file-mb and --sandbox-max-processes must be 0 (no limit) or more")
	}
	c.SandboxLimits.FileSize <<= 20
	switch *sandboxMode {
	case "on":
		c.Sandbox = true
	case "off":
	default:
		return c, fmt.Errorf("--sandbox (MAJOR_SANDBOX) is on or off, not %q", *sandboxMode)
	}
	if !filepath.IsAbs(c.ManagedSettings) {
		return c, fmt.Errorf("--claude-managed-settings (MAJOR_CLAUDE_MANAGED_SETTINGS) must be an absolute path, not %q", c.ManagedSettings)
	}
	if !c.Sandbox && filepath.Clean(c.ManagedSettings) != sandbox.ManagedSettingsDir {
		// Outside a sandbox the CLI reads its own folder; nothing can
		// show it another.
		return c, fmt.Errorf("--claude-managed-settings (MAJOR_CLAUDE_MANAGED_SETTINGS) needs the sandbox: with --sandbox=off the CLI reads %s", sandbox.ManagedSettingsDir)
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	switch {
	case c.VaultRoot == "":
		return c, errors.New("--vault-root (MAJOR_VAULT_ROOT) is required")
	case c.AuthFile == "":
		return c, errors.New("--auth-file (MAJOR_AUTH_FILE) is required")
	}
	if c.StateDir == "" {
		c.StateDir = defaultStateDir(getenv)
	}
	if c.ConfigDir == "" {
		c.ConfigDir = defaultConfigDir(getenv)
	}
	switch {
	case c.MaxProcesses < 0:
		return c, errors.New("--max-processes (MAJOR_MAX_PROCESSES) must be 0 (no limit) or more")
	case c.MaxPerPerson < 0:
		return c, errors.New("--max-processes-per-person (MAJOR_MAX_PROCESSES_PER_PERSON) must be at least 1")
	case c.MaxPerPerson == 0 && c.MaxProcesses > 0:
		c.MaxPerPerson = (c.MaxProcesses + 1) / 2
	}
	if c.Warm < 0 {
		return c, errors.New("--warm-processes (MAJOR_WARM_PROCESSES) must be 0 (none) or more")
	}
	switch {
	case c.SessionsPerPerson < 0:
		return c, errors.New("--max-sessions-per-person (MAJOR_MAX_SESSIONS_PER_PERSON) must be 0 (no limit) or more")
	case c.ReadTimeout <= 0:
		return c, errors.New("--http-read-timeout (MAJOR_HTTP_READ_TIMEOUT) must be positive")
	case c.KeepAlive <= 0:
		return c, errors.New("--http-idle-timeout (MAJOR_HTTP_IDLE_TIMEOUT) must be positive")
	case !(c.Limits.SessionUSD >= 0) || math.IsInf(c.Limits.SessionUSD, 0):
		return c, errors.New("--max-budget-usd-session (MAJOR_MAX_BUDGET_USD_SESSION) must be 0 (no limit) or more")
	case !(c.Limits.PersonDayUSD >= 0) || math.IsInf(c.Limits.PersonDayUSD, 0):
		return c, errors.New("--max-budget-usd-day (MAJOR_MAX_BUDGET_USD_DAY) must be 0 (no limit) or more")
	case c.Limits.MaxTurns < 0:
		return c, errors.New("--max-turns (MAJOR_MAX_TURNS) must be 0 (no limit) or more")
	case c.TerminalGrace <= 0:
		return c, errors.New("--terminal-grace (MAJOR_TERMINAL_GRACE) must be positive")
	case c.ShutdownGrace <= 0:
		return c, errors.New("--shutdown-grace (MAJOR_SHUTDOWN_GRACE) must be positive")
	case c.GitRemoteTimeout <= 0:
		return c, errors.New("--git-remote-timeout (MAJOR_GIT_REMOTE_TIMEOUT) must be positive")
	case *fileMiB < 1 || *fileMiB > 1024:
		return c, errors.New("--attachment-max-file-mb (MAJOR_ATTACHMENT_MAX_FILE_MB) must be from 1 to 1024")
	case *messageMiB < *fileMiB || *messageMiB > 4096:
		return c, errors.New("--attachment-max-message-mb (MAJOR_ATTACHMENT_MAX_MESSAGE_MB) must be at least --attachment-max-file-mb and at most 4096")
	case c.Attachments.Files < 1:
		return c, errors.New("--attachment-max-files (MAJOR_ATTACHMENT_MAX_FILES) must be at least 1")
	case c.Attachments.ImageEdge < 200 || c.Attachments.ImageEdge > 8000:
		return c, errors.New("--attachment-image-edge (MAJOR_ATTACHMENT_IMAGE_EDGE) must be from 200 to 8000 (the API's largest)")
	case *noteKiB < 1 || *noteKiB > 10240:
		return c, errors.New("--attach-note-max-kb (MAJOR_ATTACH_NOTE_MAX_KB) must be from 1 to 10240")
	}
	c.Attachments.FileBytes, c.Attachments.MessageBytes = int64(*fileMiB)<<20, int64(*messageMiB)<<20
	c.Attachments.NoteBytes = *noteKiB << 10
	return c, nil
}

// commandsUsage is what `major --help` prints: the commands.
const commandsUsage = `Major serves the Claude Code CLI to the notes app's clients.

usage:
  major serve [flags]        run the server (major serve --help lists its flags)
  major token add|list|revoke --auth-file FILE ...
                             add, list or revoke access tokens
  major backup [--state-dir DIR] DEST
                             copy the server's state to DEST while it runs
  major person export|import|list --state-dir DIR ...
                             move a person between servers (see Several servers)
  major --help               this text
`

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool {
	switch arg {
	case "-h", "-help", "--help", "help":
		return true
	}
	return false
}

// helpOut is where a command's flag set prints: asked for help (a help
// flag before any "--"), the usage is the answer and goes to stdout;
// otherwise it goes with an error, to stderr.
func helpOut(args []string, stdout, stderr io.Writer) io.Writer {
	for _, a := range args {
		if a == "--" {
			break
		}
		if a != "help" && isHelp(a) {
			return stdout
		}
	}
	return stderr
}

// helped makes a command's answer to a help flag (its usage, printed)
// a success.
func helped(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}

// run is the whole program, with its environment as a list of KEY=value;
// tests call it with ":0", temp dirs and an environment of their own.
func run(ctx context.Context, args, environ []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "token" {
		return helped(token(args[1:], lookup(environ), stdout, helpOut(args[1:], stdout, stderr)))
	}
	if len(args) > 0 && args[0] == "person" {
		return helped(person(ctx, args[1:], lookup(environ), stdout, helpOut(args[1:], stdout, stderr)))
	}
	if len(args) > 0 && args[0] == "backup" {
		return helped(backup(ctx, args[1:], lookup(environ), stdout, helpOut(args[1:], stdout, stderr)))
	}
	if len(args) > 0 && isHelp(args[0]) {
		fmt.Fprint(stdout, commandsUsage)
		return nil
	}
	if len(args) == 0 || args[0] != "serve" {
		fmt.Fprint(stderr, commandsUsage)
		return errors.New("no command")
	}
	cfg, err := parseFlags(args[1:], lookup(environ), helpOut(args[1:], stdout, stderr))
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	level, err := zerolog.ParseLevel(cfg.LogLevel)
	if err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	log := zerolog.New(stdout).Level(level).With().Timestamp().Logger()
	cfg.Environ = environ
	err = serve(ctx, cfg, log, stdout)
	// Everything serve started has ended by now.
	log.Info().Err(err).Msg("major has stopped")
	return err
}

// findClaude resolves the claude binary: the flag, the project's pinned
// install next to the executable or the working directory, then PATH.
func findClaude(flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	var candidates []string
	if exe, err := os.Executable(); err == nil {
		candidates = append(candidates, filepath.Join(filepath.Dir(exe), "..", ".tools", "claude", "node_modules", ".bin", "claude"))
	}
	if wd, err := os.Getwd(); err == nil {
		candidates = append(candidates, filepath.Join(wd, ".tools", "claude", "node_modules", ".bin", "claude"))
	}
	for _, c := range candidates {
		if st, err := os.Stat(c); err == nil && !st.IsDir() {
			return filepath.Clean(c), nil
		}
	}
	p, err := exec.LookPath("claude")
	if err != nil {
		return "", errors.New("no claude binary: run `make claude`, or pass --claude")
	}
	return p, nil
}

func listen(ctx context.Context, addr string) (net.Listener, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	return ln, nil
}

// serveHTTP serves h on ln until ctx ends, then begins down, runs
// onShutdown and drains until down's time is up.
// A client has readTimeout to send a request, body included, and a
// connection idle for keepAlive between requests is closed. There is no
// write timeout, so an answer streams for as long as its turn lasts (the
// relay bounds each line it writes); net/http lifts the read deadline once
// the body is read, so ReadTimeout never ends a stream either.
// With tlsConfig it serves HTTPS, HTTP/1.1 only: the terminal's WebSocket
// is an HTTP/1.1 upgrade.
// The HTTP server's own complaints (a client's failed TLS handshake, a
// bad request line) go to errorLog.
func serveHTTP(ctx context.Context, ln net.Listener, tlsConfig *tls.Config, errorLog *stdlog.Logger, h http.Handler, readTimeout, keepAlive time.Duration, down *shutdown, onShutdown func()) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: min(10*time.Second, readTimeout),
		ReadTimeout: readTimeout, IdleTimeout: keepAlive, ErrorLog: errorLog}
	errc := make(chan error, 1)
	if tlsConfig != nil {
		srv.TLSConfig = tlsConfig
		srv.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
		go func() { errc <- srv.ServeTLS(ln, "", "") }()
	} else {
		go func() { errc <- srv.Serve(ln) }()
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	down.begin()
	if onShutdown != nil {
		onShutdown()
	}
	err := srv.Shutdown(down.end)
	<-errc
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// debugLog is a standard logger that writes each line to log at debug
// level: what net/http reports of clients (failed TLS handshakes from
// scanners, mostly) is no operator's concern unless looked for.
func debugLog(log zerolog.Logger) *stdlog.Logger {
	return stdlog.New(debugWriter{log}, "", 0)
}

type debugWriter struct{ log zerolog.Logger }

func (w debugWriter) Write(p []byte) (int, error) {
	w.log.Debug().Msg(strings.TrimSpace(string(p)))
	return len(p), nil
}
