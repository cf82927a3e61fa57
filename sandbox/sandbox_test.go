package sandbox_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/majorhq/major/sandbox"
)

// newSandbox makes the real sandbox; bubblewrap comes from the project's
// install script (make test runs it), so a machine without it fails here
// rather than passing without the boundary.
func newSandbox(tb testing.TB, private ...string) *sandbox.Sandbox {
	tb.Helper()
	sb, err := sandbox.New(context.Background(), sandbox.Config{Private: private, Limits: sandbox.DefaultLimits, Name: tb.TempDir()})
	if err != nil {
		tb.Fatalf("%v (scripts/install-bubblewrap.sh installs it)", err)
	}
	tb.Cleanup(sb.Close)
	return sb
}

// options reads a command line back: each option with its arguments, in
// order, up to "--", and the command after it.
func options(tb testing.TB, argv []string) (opts [][]string, command []string) {
	tb.Helper()
	arity := map[string]int{"--ro-bind": 2, "--ro-bind-try": 2, "--bind": 2, "--symlink": 2, "--proc": 1, "--dev": 1, "--tmpfs": 1,
		"--chdir": 1, "--hostname": 1, "--cap-drop": 1}
	// What comes before bwrap puts it in its person's group and under
	// the file size limit (limits.go); the options are bwrap's.
	start := slices.IndexFunc(argv, func(a string) bool { return filepath.Base(a) == "bwrap" })
	if start < 0 {
		tb.Fatalf("no bwrap in %q", argv)
	}
	for i := start + 1; i < len(argv); i++ {
		if argv[i] == "--" {
			return opts, argv[i+1:]
		}
		n := arity[argv[i]]
		if i+n >= len(argv) {
			tb.Fatalf("option %s without its arguments: %q", argv[i], argv)
		}
		opts = append(opts, argv[i:i+n+1])
		i += n
	}
	tb.Fatalf("no -- in %q", argv)
	return nil, nil
}

func mounted(opts [][]string) map[string]string {
	m := map[string]string{}
	for _, o := range opts {
		switch o[0] {
		case "--ro-bind", "--ro-bind-try":
			m[o[2]] = "ro"
		case "--bind":
			m[o[2]] = "rw"
		}
	}
	return m
}

// The command line holds every option that makes the boundary, mounts
// what a box names where it is on the host (the vault folder and home
// writable, the rest read-only), and nothing of /etc that holds secrets.
func TestCommandLine(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	vault := filepath.Join(root, "vault")
	state := filepath.Join(root, "state")
	home := filepath.Join(state, "persons", "sebastian", "home")
	seb := filepath.Join(vault, "sebastian")
	install := filepath.Join(root, "install")
	prog := filepath.Join(root, "tools", "server")
	for _, d := range []string{seb, filepath.Join(vault, "petra"), home, install, filepath.Dir(prog)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(prog, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	sb := newSandbox(t, vault, state)
	argv := sb.Command(sandbox.Box{Dir: seb, Writable: []string{home}, ReadOnly: []string{install, "/no/such/file"},
		Named: []string{prog, vault, filepath.Join(vault, "petra", "x"), root, state + "/usage.json"}}, "/bin/claude", "-p")
	opts, command := options(t, argv)
	if !slices.Equal(command, []string{"/bin/claude", "-p"}) {
		t.Errorf("command %q", command)
	}
	has := func(o ...string) bool {
		return slices.ContainsFunc(opts, func(x []string) bool { return slices.Equal(x, o) })
	}
	for _, o := range [][]string{{"--unshare-all"}, {"--share-net"}, {"--unshare-user"}, {"--disable-userns"},
		{"--cap-drop", "ALL"}, {"--die-with-parent"}, {"--new-session"}, {"--proc", "/proc"}, {"--dev", "/dev"},
		{"--tmpfs", "/tmp"}, {"--chdir", seb}} {
		if !has(o...) {
			t.Errorf("no %q in %q", o, argv)
		}
	}
	m := mounted(opts)
	want := map[string]string{seb: "rw", home: "rw", install: "ro", prog: "ro", "/proc/sys": "ro", "/proc/sysrq-trigger": "ro"}
	for p, mode := range want {
		if m[p] != mode {
			t.Errorf("%s mounted %q, want %q", p, m[p], mode)
		}
	}
	for p, mode := range m {
		switch {
		case want[p] != "":
		case strings.HasPrefix(p, root):
			t.Errorf("%s mounted (%s): only what the box names may be", p, mode)
		case strings.HasPrefix(p, "/etc/ssl/private"), p == "/etc/shadow", p == "/etc", p == "/root", p == "/home", p == "/":
			t.Errorf("%s mounted (%s)", p, mode)
		case mode == "rw":
			t.Errorf("%s mounted writable", p)
		}
	}
	if got := sb.Refused([]string{prog, vault, root, state + "/usage.json"}); !slices.Equal(got, []string{vault, root}) {
		// usage.json does not exist: nothing is mounted for it anyway.
		t.Errorf("refused %q, want the vault root and the folder holding it", got)
	}

	// A terminal keeps its session (and controlling terminal).
	opts, _ = options(t, sb.Command(sandbox.Box{Dir: seb, Terminal: true}, "/bin/claude"))
	if slices.ContainsFunc(opts, func(o []string) bool { return o[0] == "--new-session" }) {
		t.Error("a terminal's sandbox starts a session of its own")
	}
}

// What runs inside sees its person's folder and nothing else of the
// server's, writes only there and in its home, sees only its own
// processes, holds no capability, and gets exactly the environment it is
// given.
func TestInside(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	vault := filepath.Join(root, "vault")
	seb, petra := filepath.Join(vault, "sebastian"), filepath.Join(vault, "petra")
	home := filepath.Join(root, "state", "home")
	for _, d := range []string{seb, petra, home} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(petra, "secret.md"), []byte("petra's secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "auth.json"), []byte("server secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	sb := newSandbox(t, vault, filepath.Join(root, "state"))
	script := strings.Join([]string{
		"cat " + filepath.Join(petra, "secret.md") + " " + filepath.Join(root, "auth.json") + " 2>&1",
		"echo note > " + filepath.Join(seb, "mine.md"),
		"echo h > " + filepath.Join(home, "h"),
		"echo x > " + filepath.Join(root, "escaped") + " 2>&1",
		"echo x > /usr/escaped 2>&1",
		"echo pids: $(ls /proc | grep -c '^[0-9]')",
		"grep CapEff /proc/self/status",
		"echo env: $(env | sort | tr '\\n' ' ')",
		"pwd",
	}, "; ")
	argv := sb.Command(sandbox.Box{Dir: seb, Writable: []string{home}}, "/bin/sh", "-c", script)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = []string{"ONLY=this", "PATH=/usr/bin:/bin"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	got := string(out)
	t.Logf("inside:\n%s", got)
	for _, secret := range []string{"petra's secret", "server secret"} {
		if strings.Contains(got, secret) {
			t.Errorf("read %q from inside", secret)
		}
	}
	if b, err := os.ReadFile(filepath.Join(seb, "mine.md")); err != nil || string(b) != "note\n" {
		t.Errorf("the person's folder is not writable: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(home, "h")); err != nil {
		t.Errorf("the home is not writable: %v", err)
	}
	for _, p := range []string{filepath.Join(root, "escaped"), "/usr/escaped"} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s was written from inside", p)
		}
	}
	if !strings.Contains(got, "CapEff:\t0000000000000000") {
		t.Error("a capability is left inside")
	}
	// bwrap's init, sh and the pipeline: a handful, never the host's.
	var pids int
	if _, err := fmt.Sscanf(got[strings.Index(got, "pids: "):], "pids: %d", &pids); err != nil || pids > 8 {
		t.Errorf("the sandbox sees %d processes (%v)", pids, err)
	}
	// sh adds PWD.
	if !strings.Contains(got, "env: ONLY=this PATH=/usr/bin:/bin PWD="+seb+"\n") {
		t.Errorf("the environment inside is not the one given")
	}
	if !strings.HasSuffix(strings.TrimSpace(got), seb) {
		t.Errorf("working directory is not the person's folder")
	}
}

// The server's home is never mounted whole, nor through a folder that
// holds it; a program inside it may be.
func TestHomesAreNotMountedWhole(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	home := filepath.Join(root, "home", "server")
	tool := filepath.Join(home, "bin", "tool")
	if err := os.MkdirAll(filepath.Dir(tool), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tool, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	sb, err := sandbox.New(context.Background(), sandbox.Config{Homes: []string{home}})
	if err != nil {
		t.Fatal(err)
	}
	if got := sb.Refused([]string{tool, home, filepath.Dir(home), root}); !slices.Equal(got, []string{home, filepath.Dir(home), root}) {
		t.Errorf("refused %q", got)
	}
}

// The machine's Claude Code managed settings (its policy) are where the
// CLI reads them inside every sandbox, read-only; a folder of the
// server's is never offered as them.
func TestManagedSettingsReachTheSandbox(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	managed := filepath.Join(root, "managed")
	state := filepath.Join(root, "state")
	for _, d := range []string{managed, state} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(managed, "managed-settings.json"), []byte(`{"policy":"machine"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	sb, err := sandbox.New(context.Background(), sandbox.Config{ManagedSettings: managed, Private: []string{state}})
	if err != nil {
		t.Fatal(err)
	}
	script := "cat " + sandbox.ManagedSettingsDir + "/managed-settings.json; echo; echo x > " + sandbox.ManagedSettingsDir + "/managed-settings.json 2>&1 || echo read-only"
	argv := sb.Command(sandbox.Box{Dir: t.TempDir()}, "/bin/sh", "-c", script)
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got := string(out); !strings.HasPrefix(got, `{"policy":"machine"}`) || !strings.Contains(got, "read-only") {
		t.Fatalf("inside: %q", got)
	}

	for _, bad := range []string{state, filepath.Join(state, "policy")} {
		if err := os.MkdirAll(bad, 0o755); err != nil {
			t.Fatal(err)
		}
		if _, err := sandbox.New(context.Background(), sandbox.Config{ManagedSettings: bad, Private: []string{state}}); err == nil {
			t.Errorf("%s, a folder of the server's, was taken as the managed settings", bad)
		}
	}
}
