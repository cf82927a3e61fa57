// Package sandbox builds the bubblewrap (bwrap) command line that runs one
// person's claude, and everything that claude starts (MCP servers, the
// shell of a terminal's `!`, hook commands), in a world of its own: a
// fresh mount namespace that holds the system's programs read-only, the
// CLI's install read-only, the person's vault folder and CLI home
// read-write at their real paths, the few files the session is started
// with read-only, a private /tmp; PID, IPC, UTS, cgroup and user
// namespaces of its own, no capabilities, and no way back out (the
// sandbox dies with the server, and cannot make namespaces of its own).
// The network is shared: the CLI reaches the model gateway on loopback
// and the web.
//
// It owns that command line, the check that the kernel and bwrap can make
// it, and nothing else: it does not decide which files a session needs
// (assembly and terminal say), start or stop processes (supervisor and
// terminal do), or touch the environment (the caller gives the child the
// environment it should see; bwrap passes it on unchanged).
package sandbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

// ErrUnavailable is why a server that wants the sandbox cannot have it:
// no bwrap, a kernel that refuses the namespaces, or not Linux.
var ErrUnavailable = errors.New("the sandbox is not available")

// Install is the hint given with ErrUnavailable.
const Install = "install bubblewrap (Debian: apt-get install bubblewrap), allow unprivileged user namespaces " +
	"(sysctl kernel.unprivileged_userns_clone=1), or start with --sandbox=off to run without the boundary " +
	"(the vault guard alone)"

// Sandbox makes the command lines; the zero value is not usable, use New.
type Sandbox struct {
	bwrap string
	// system are the mounts every sandbox starts with.
	system  []string
	private []string
	homes   []string
	limits  Limits
	groups  groups
	prlimit string
}

// Config configures a Sandbox.
type Config struct {
	// Bwrap is the bwrap binary; default "bwrap" on PATH.
	Bwrap string
	// PATH is where a Bwrap without a slash is looked for; default the
	// process's PATH.
	PATH string
	// Limits bound each person's sandboxes (file size, processes); a
	// limit the machine cannot enforce is an error at New.
	Limits Limits
	// CgroupRoot is where the persons' pids groups are made, for tests;
	// default the server's own pids cgroup. Name tells this server's
	// groups from another's on the machine (its state directory).
	CgroupRoot string
	Name       string
	// Root is the host's root, for tests of the command line; default "/".
	Root string
	// Private are the server's own files and folders (the vault root,
	// the state and configuration directories, the auth and LinkedIn
	// files, its CLI configuration): a path a configuration names
	// (Box.Named) is never mounted if it is one of them, inside one or
	// holds one.
	Private []string
	// Homes are folders that must not be mounted whole (the server's
	// home): a named path that is one or holds one is never mounted; what
	// is inside may be (a program in ~/bin).
	Homes []string
	// ManagedSettings is the host folder of Claude Code's managed
	// settings (the machine's policy for every claude), mounted read-only
	// at ManagedSettingsDir in every sandbox, where the CLI reads them;
	// default ManagedSettingsDir under Root. A folder that does not exist
	// is left out.
	ManagedSettings string
}

// ManagedSettingsDir is where the CLI reads its managed settings on Linux
// (managed-settings.json and managed-settings.d/): the machine's policy,
// which holds for the sandboxed CLI as for any other.
const ManagedSettingsDir = "/etc/claude-code"

// New finds bwrap and checks that it can make a sandbox here, by making
// one: a trivial command run in exactly the namespaces and mounts every
// person's CLI gets. The error wraps ErrUnavailable and says what is
// wrong and how to fix it.
func New(ctx context.Context, cfg Config) (*Sandbox, error) {
	if runtime.GOOS != "linux" {
		return nil, fmt.Errorf("%w: the sandbox needs Linux (this is %s); start with --sandbox=off to run without the boundary", ErrUnavailable, runtime.GOOS)
	}
	name := cfg.Bwrap
	if name == "" {
		name = "bwrap"
	}
	path, err := find(name, cfg.PATH)
	if err != nil {
		return nil, fmt.Errorf("%w: %s not found: %s", ErrUnavailable, name, Install)
	}
	s := &Sandbox{bwrap: path, system: systemMounts(cfg.Root), limits: cfg.Limits}
	if cfg.Limits.FileSize > 0 {
		if s.prlimit = findPrlimit(cfg.PATH); s.prlimit == "" {
			return nil, fmt.Errorf("%w: prlimit (util-linux) not found, which limits the size of files a sandbox writes", ErrUnavailable)
		}
	}
	if s.groups, err = newGroups(cfg.Limits.Processes, cfg.CgroupRoot, cfg.Name); err != nil {
		return nil, fmt.Errorf("%w: a limit on each person's processes needs a pids cgroup: %v; or start with --sandbox-max-processes=0 (no limit)", ErrUnavailable, err)
	}
	s.private, s.homes = cleaned(cfg.Private), cleaned(cfg.Homes)
	managed := cfg.ManagedSettings
	if managed == "" {
		managed = filepath.Join(cmp.Or(cfg.Root, "/"), ManagedSettingsDir)
	}
	if st, err := os.Stat(managed); err == nil && st.IsDir() {
		if s.overlapsPrivate(managed) {
			return nil, fmt.Errorf("the managed settings folder %s is, holds or is inside a folder of the server's (vault, state or configuration): every sandbox would see it", managed)
		}
		s.system = append(s.system, "--ro-bind", managed, ManagedSettingsDir)
	}
	if err := s.probe(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// find finds an executable name in the folders of path (the process's
// PATH if empty); a name with a slash is taken as it is.
func find(name, path string) (string, error) {
	if path == "" || strings.ContainsRune(name, '/') {
		return exec.LookPath(name)
	}
	for _, dir := range filepath.SplitList(path) {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 && filepath.IsAbs(p) {
			return p, nil
		}
	}
	return "", exec.ErrNotFound
}

// Close removes what the sandbox made on the machine (the persons' pids
// groups) once nothing runs in it any more.
func (s *Sandbox) Close() { s.groups.close() }

// probe runs `true` in a sandbox.
func (s *Sandbox) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	argv := s.Command(Box{}, "/bin/true")
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = []string{}
	out, err := cmd.CombinedOutput()
	if err != nil {
		msg := strings.TrimSpace(string(out))
		if msg == "" {
			msg = err.Error()
		}
		return fmt.Errorf("%w: %s cannot make a sandbox here (%s): %s", ErrUnavailable, s.bwrap, msg, Install)
	}
	return nil
}

// Bwrap is the bwrap binary in use.
func (s *Sandbox) Bwrap() string { return s.bwrap }

// Box is what one CLI process sees beyond the system: every path is an
// absolute host path, mounted at that same path inside, so paths in
// transcripts, tool results and the CLI's own files mean the same inside
// and out.
type Box struct {
	// Dir is the working directory (the person's vault folder),
	// read-write.
	Dir string
	// Writable are more folders the CLI writes in, at their real paths.
	Writable []string
	// Mounts are folders mounted at another path inside (the person's
	// CLI home, at a path that names nothing of the server's).
	Mounts []Mount
	// ReadOnly are files and folders it may read (the CLI's install, the
	// session's configuration, the programs the owner's MCP servers
	// run). A path that does not exist is left out.
	ReadOnly []string
	// Named are the files and folders a configuration names (the
	// programs of the owner's MCP servers and the paths among their
	// arguments), read-only; one that is or overlaps a private path of
	// the server's is left out (see Refused).
	Named []string
	// Sockets are unix sockets it talks to (a terminal's hook socket).
	Sockets []string
	// Terminal keeps the sandbox in the caller's session, so that the
	// pseudo-terminal the caller made its controlling terminal stays
	// that (resizes reach the CLI as SIGWINCH); the caller must then have
	// made a session of its own for it (Setsid). Without it the sandbox
	// starts a session of its own, with no controlling terminal, so
	// nothing in it can push input into a terminal of the server's.
	Terminal bool
	// Person is whose sandbox it is: all of a person's sandboxes share
	// one limit on processes (Limits.Processes).
	Person string
}

// Mount is a host folder seen inside at At, writable or not.
type Mount struct {
	Host, At string
	Writable bool
}

// Command is the command line that runs argv (an absolute program path
// and its arguments) in box: bwrap, its options, "--", argv.
//
// Every option that makes the boundary is here and only here; the test
// of this package reads the line back.
func (s *Sandbox) Command(box Box, argv ...string) []string {
	args := []string{s.bwrap,
		// Namespaces of its own (user, pid, ipc, uts, cgroup) but the
		// network's: the CLI reaches the model gateway on loopback.
		"--unshare-all", "--share-net", "--unshare-user",
		// No user namespaces inside: nothing can map itself a root with
		// capabilities there.
		"--disable-userns",
		// A process started as root keeps no capability inside.
		"--cap-drop", "ALL",
		// The sandbox ends when the server does, however it ends.
		"--die-with-parent",
		"--hostname", "sandbox",
	}
	if !box.Terminal {
		args = append(args, "--new-session")
	}
	args = append(args, s.system...)
	args = append(args, "--proc", "/proc")
	args = append(args, procMasks...)
	args = append(args, "--dev", "/dev", "--tmpfs", "/tmp")
	// Later mounts go over earlier ones: a file of the server's under
	// /tmp (a test binary) is bound over the private /tmp.
	for _, p := range existing(box.ReadOnly) {
		args = append(args, "--ro-bind", p, p)
	}
	for _, p := range existing(box.Named) {
		if !s.overlapsPrivate(p) {
			args = append(args, "--ro-bind", p, p)
		}
	}
	for _, p := range existing(box.Writable) {
		args = append(args, "--bind", p, p)
	}
	for _, m := range box.Mounts {
		if len(existing([]string{m.Host})) == 0 || !filepath.IsAbs(m.At) {
			continue
		}
		op := "--ro-bind"
		if m.Writable {
			op = "--bind"
		}
		args = append(args, op, filepath.Clean(m.Host), filepath.Clean(m.At))
	}
	for _, p := range existing(box.Sockets) {
		args = append(args, "--bind", p, p)
	}
	if box.Dir != "" {
		args = append(args, "--bind", box.Dir, box.Dir, "--chdir", box.Dir)
	}
	args = append(args, "--")
	return s.wrap(box.Person, append(args, argv...))
}

// Refused is those of paths (a Box's Named) that Command leaves out
// because they are, are inside or hold one of the server's private paths;
// the caller logs them.
func (s *Sandbox) Refused(paths []string) []string {
	var out []string
	for _, p := range existing(paths) {
		if s.overlapsPrivate(p) {
			out = append(out, p)
		}
	}
	return out
}

func (s *Sandbox) overlapsPrivate(p string) bool {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return true
	}
	for _, c := range []string{p, real} {
		for _, q := range s.private {
			if within(c, q) || within(q, c) {
				return true
			}
		}
		for _, q := range s.homes {
			if within(q, c) {
				return true
			}
		}
	}
	return false
}

// cleaned is paths, cleaned, each also as its links resolve, without
// empty ones.
func cleaned(paths []string) []string {
	var out []string
	for _, p := range paths {
		if p == "" {
			continue
		}
		out = append(out, filepath.Clean(p))
		if real, err := filepath.EvalSymlinks(p); err == nil && real != filepath.Clean(p) {
			out = append(out, real)
		}
	}
	return out
}

// within reports whether p is dir or inside it.
func within(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// existing is paths that exist, cleaned, without repeats, in order.
func existing(paths []string) []string {
	var out []string
	for _, p := range paths {
		if p == "" || !filepath.IsAbs(p) {
			continue
		}
		p = filepath.Clean(p)
		if _, err := os.Stat(p); err != nil || slices.Contains(out, p) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// procMasks keep what a sandbox's own /proc still shows of the host's
// kernel out of reach. A server started as root runs its sandboxes as the
// same uid 0 (only without capabilities), and the kernel lets uid 0 write
// its global settings by the files' owner alone: /proc/sys (core_pattern
// names a program the kernel runs as root on a core dump), the
// sysrq trigger and interrupt affinities are read-only; the kernel's
// memory, keys, symbol table and timer and scheduler internals are
// replaced by an empty file. Entries a kernel lacks are skipped.
var procMasks = func() []string {
	var args []string
	for _, p := range []string{"/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs"} {
		args = append(args, "--ro-bind-try", p, p)
	}
	for _, p := range []string{"/proc/kcore", "/proc/keys", "/proc/key-users", "/proc/kallsyms", "/proc/timer_list",
		"/proc/sched_debug", "/proc/latency_stats", "/proc/kmsg", "/proc/kpagecount", "/proc/kpageflags", "/proc/kpagecgroup"} {
		// The sandbox's /proc is the same kernel's: what the host's
		// lacks, it lacks too.
		if _, err := os.Stat(p); err == nil {
			args = append(args, "--ro-bind", "/dev/null", p)
		}
	}
	return args
}()

// systemDirs are the host's folders of programs and libraries, read-only
// in every sandbox; on a merged-/usr system most are links into /usr.
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// systemFiles are what a program needs of /etc to run, resolve names,
// check TLS certificates and tell the time, and nothing else of it: no
// shadow, no keys, no server configuration.
var systemFiles = []string{
	"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d",
	"/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/host.conf", "/etc/gai.conf",
	// Certificates, not /etc/ssl/private: a sandbox started by root
	// would read root's keys there.
	"/etc/ssl/certs", "/etc/ssl/openssl.cnf", "/etc/ca-certificates", "/etc/ca-certificates.conf",
	"/etc/pki/tls/certs", "/etc/pki/ca-trust/extracted",
	"/etc/localtime", "/etc/timezone",
	"/etc/passwd", "/etc/group",
	"/etc/alternatives", "/etc/mime.types", "/etc/os-release",
}

// systemMounts are the options that mount systemDirs and systemFiles as
// they are on the host under root: a link as a link, a folder or file
// read-only, anything missing left out.
func systemMounts(root string) []string {
	if root == "" {
		root = "/"
	}
	var args []string
	for _, p := range systemDirs {
		host := filepath.Join(root, p)
		st, err := os.Lstat(host)
		switch {
		case err != nil:
		case st.Mode()&os.ModeSymlink != 0:
			if target, err := os.Readlink(host); err == nil {
				args = append(args, "--symlink", target, p)
			}
		case st.IsDir():
			args = append(args, "--ro-bind", host, p)
		}
	}
	for _, p := range systemFiles {
		host := filepath.Join(root, p)
		if _, err := os.Stat(host); err == nil {
			args = append(args, "--ro-bind", host, p)
		}
	}
	return args
}

// InstallDir is what of a CLI's install a sandbox must hold for the
// binary to run: for an npm install the package's folder (the one with
// package.json, a few levels above the binary, whose bundled tools it may
// call), else the binary alone (a self-contained build), never the
// folder it happens to sit in. binary is resolved through links first.
func InstallDir(binary string) (string, error) {
	real, err := filepath.EvalSymlinks(binary)
	if err != nil {
		return "", fmt.Errorf("find the CLI's install: %w", err)
	}
	for d, i := filepath.Dir(real), 0; i < 3; d, i = filepath.Dir(d), i+1 {
		if _, err := os.Stat(filepath.Join(d, "package.json")); err == nil {
			return d, nil
		}
		if d == filepath.Dir(d) {
			break
		}
	}
	return real, nil
}

// Holds reports whether mounting p would show one of the server's
// private paths: p is, is inside or holds one.
func (s *Sandbox) Holds(p string) bool { return s.overlapsPrivate(p) }
