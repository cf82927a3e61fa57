package cluster

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/majorhq/major/clitest"
	"github.com/majorhq/major/ring"
)

const token = "cluster-token"

// major is one server: its own clone of the vault, its own state
// directory, run as the built binary.
type major struct {
	name, url, vault, state string
	args                    []string
	env                     []string
	cmd                     *exec.Cmd
	logs                    *clitest.Buffer
	exited                  chan struct{}
}

func moduleRoot(tb testing.TB) string {
	tb.Helper()
	// A test runs in its package's folder (the file names the runtime
	// reports are module paths under -trimpath, as make test builds).
	wd, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	return filepath.Dir(wd)
}

// build compiles the major binary.
func build(tb testing.TB) string {
	tb.Helper()
	bin := filepath.Join(tb.TempDir(), "major")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/major")
	cmd.Dir = moduleRoot(tb)
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("build major: %v\n%s", err, out)
	}
	return bin
}

func git(tb testing.TB, dir string, args ...string) string {
	tb.Helper()
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput()
	if err != nil {
		tb.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// vaults makes a bare remote holding every person's folder and n clones
// of it, each tracking it.
func vaults(tb testing.TB, persons []string, n int) []string {
	tb.Helper()
	dir := tb.TempDir()
	bare := filepath.Join(dir, "vault.git")
	git(tb, dir, "init", "-q", "--bare", "-b", "main", bare)
	seed := filepath.Join(dir, "seed")
	git(tb, dir, "init", "-q", "-b", "main", seed)
	for _, p := range persons {
		if err := os.MkdirAll(filepath.Join(seed, p), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(seed, p, "README.md"), []byte(p+"'s notes\n"), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	git(tb, seed, "add", ".")
	git(tb, seed, "-c", "user.name=seed", "-c", "user.email=seed@example.org", "commit", "-q", "-m", "persons")
	git(tb, seed, "push", "-q", bare, "main")
	var clones []string
	for i := 0; i < n; i++ {
		c := filepath.Join(dir, fmt.Sprintf("clone%d", i+1))
		git(tb, dir, "clone", "-q", bare, c)
		git(tb, c, "config", "user.name", "major")
		git(tb, c, "config", "user.email", "major@example.org")
		clones = append(clones, c)
	}
	return clones
}

// environ is this process's environment with the test's HOME and model.
func environ(env *clitest.Env) []string {
	var out []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "HOME" && !strings.HasPrefix(k, "ANTHROPIC_") && !strings.HasPrefix(k, "CLAUDE_") && !strings.HasPrefix(k, "MAJOR_") {
			out = append(out, kv)
		}
	}
	for _, kv := range env.ChildEnv() {
		if k, _, _ := strings.Cut(kv, "="); k == "HOME" || strings.HasPrefix(k, "ANTHROPIC_") || strings.HasPrefix(k, "CLAUDE_") {
			out = append(out, kv)
		}
	}
	return out
}

// start runs m's server and waits until it serves.
func (m *major) start(tb testing.TB, bin string) {
	tb.Helper()
	m.cmd = exec.Command(bin, m.args...)
	m.cmd.Env = m.env
	m.logs = &clitest.Buffer{}
	m.cmd.Stdout, m.cmd.Stderr = m.logs, m.logs
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := m.cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	m.exited = make(chan struct{})
	cmd, exited := m.cmd, m.exited
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	tb.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	})
	m.url = ""
	for deadline := time.Now().Add(60 * time.Second); m.url == ""; time.Sleep(50 * time.Millisecond) {
		for _, line := range strings.Split(m.logs.String(), "\n") {
			if strings.Contains(line, "major is serving") {
				var l struct{ Addr string }
				_ = json.Unmarshal([]byte(line), &l)
				m.url = l.Addr
			}
		}
		select {
		case <-exited:
			tb.Fatalf("%s exited:\n%s", m.name, m.logs)
		default:
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s did not start:\n%s", m.name, m.logs)
		}
	}
}

// stop ends m's server as its service manager would (SIGTERM).
func (m *major) stop(tb testing.TB) {
	tb.Helper()
	_ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-m.exited:
	case <-time.After(60 * time.Second):
		tb.Fatalf("%s did not stop:\n%s", m.name, m.logs)
	}
}

// haproxy runs Debian's haproxy with the repository's
// deploy/haproxy.cfg, its addresses replaced by a free port and the
// servers', and returns its URL and the configuration it runs.
func haproxy(tb testing.TB, servers []*major) (string, string) {
	tb.Helper()
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		if bin = "/usr/sbin/haproxy"; !executable(bin) {
			tb.Fatal("haproxy is not installed: run scripts/install-haproxy.sh (make test does)")
		}
	}
	shipped, err := os.ReadFile(filepath.Join(moduleRoot(tb), "deploy", "haproxy.cfg"))
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg := strings.Replace(string(shipped), "bind 127.0.0.1:8443", "bind "+addr, 1)
	for i, m := range servers {
		old := fmt.Sprintf("127.0.0.1:%d", 8081+i)
		if !strings.Contains(cfg, old) {
			tb.Fatalf("deploy/haproxy.cfg has no server at %s", old)
		}
		cfg = strings.Replace(cfg, old, strings.TrimPrefix(m.url, "http://"), 1)
	}
	path := filepath.Join(tb.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(bin, "-db", "-f", path)
	logs, exited := clitest.Start(tb, cmd)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return "http://" + addr, path
		}
		select {
		case <-exited:
			tb.Fatalf("haproxy exited:\n%s", logs)
		default:
		}
		if time.Now().After(deadline) {
			tb.Fatalf("haproxy did not listen:\n%s", logs)
		}
	}
}

func executable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode()&0o111 != 0
}

// reply is /api/claude/chat's answer.
type reply struct {
	Status    int
	Header    http.Header
	SessionID string `json:"session_id"`
	Response  string
	History   []struct{ Role, Content string }
	Error     string
}

// chat sends message as person to base's /api/claude/chat.
func chat(tb testing.TB, base, person, session, message string) reply {
	tb.Helper()
	body, _ := json.Marshal(map[string]string{"message": message, "session_id": session})
	req, _ := http.NewRequest("POST", base+"/api/claude/chat", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("X-Notes-Person", person)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	var r reply
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &r)
	r.Status, r.Header = resp.StatusCode, resp.Header
	return r
}

// sessionsIn lists the ids of person's sessions in a state directory.
func sessionsIn(state, person string) []string {
	entries, _ := os.ReadDir(filepath.Join(state, "persons", person, "sessions"))
	var ids []string
	for _, e := range entries {
		ids = append(ids, e.Name())
	}
	return ids
}

// run runs `major args...` and returns its output and error.
func run(bin string, args ...string) (string, error) {
	out, err := exec.Command(bin, args...).CombinedOutput()
	return string(out), err
}

// writeNote is the directive that makes the model write a note.
func writeNote(path, content string) string {
	input, _ := json.Marshal(map[string]string{"file_path": path, "content": content})
	return "[[tool Write " + string(input) + "]]"
}

// TestCluster runs two servers, each with its own clone of one vault
// remote and its own state directory, behind HAProxy on the shipped
// configuration; six persons chat through it:
//   - each person's chats are all on the server the ring names (so the
//     ring `major person list --hash-ring` computes is HAProxy's);
//   - a note written through one server is in the other's clone once
//     that one has synced (its next write pulls);
//   - the second server stops: its persons' next messages succeed on the
//     first, which has their notes;
//   - a person exported from the stopped server's state directory is
//     refused on the first while they have state there, taken in with
//     --replace, and their chat resumes with its history (the CLI's
//     transcript came along: the model is sent the earlier messages); a
//     cut-off archive and one of another format are refused, nothing
//     half-imported;
//   - a person exported from the running first server is refused there
//     (503, Retry-After), imported into the second while it is stopped,
//     and their chat resumes there once it runs.
func TestCluster(t *testing.T) {
	bin := build(t)
	env := clitest.New(t, nil)
	candidates := []string{"anna", "ben", "clara", "dora", "emil", "finn", "greta", "hugo", "ida", "jonas", "karl", "lena", "mia", "nils", "olga", "paul"}
	clones := vaults(t, candidates, 2)
	dir := t.TempDir()
	auth := filepath.Join(dir, "auth.json")
	quoted, _ := json.Marshal(candidates)
	if err := os.WriteFile(auth, []byte(`{"tokens": {"`+token+`": `+string(quoted)+`}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	servers := make([]*major, 2)
	for i := range servers {
		m := &major{name: fmt.Sprintf("major%d", i+1), vault: clones[i], state: filepath.Join(dir, fmt.Sprintf("state%d", i+1)), env: environ(env)}
		m.args = []string{"serve", "--addr", "127.0.0.1:0", "--vault-root", m.vault, "--state-dir", m.state,
			"--config-dir", filepath.Join(dir, fmt.Sprintf("config%d", i+1)), "--claude", env.Binary, "--auth-file", auth,
			"--warm-processes", "0", "--trusted-proxies", "127.0.0.1", "--log-level", "info"}
		m.start(t, bin)
		servers[i] = m
	}
	a, b := servers[0], servers[1]
	proxy, cfg := haproxy(t, servers)

	// Three persons of each server, as the ring places them.
	list, err := ring.ReadConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r, err := ring.New(list)
	if err != nil {
		t.Fatal(err)
	}
	on := map[string]*major{}
	var ofA, ofB []string
	for _, p := range candidates {
		switch {
		case r.Server(p) == "major1" && len(ofA) < 3:
			ofA, on[p] = append(ofA, p), a
		case r.Server(p) == "major2" && len(ofB) < 3:
			ofB, on[p] = append(ofB, p), b
		}
	}
	if len(ofA) < 3 || len(ofB) < 3 {
		t.Fatalf("the ring puts too few of %v on a server: %v %v", candidates, ofA, ofB)
	}
	persons := append(append([]string{}, ofA...), ofB...)
	note := func(m *major, p string) string { return filepath.Join(m.vault, p, "note.md") }

	step := func(name string, f func(t *testing.T)) {
		if !t.Run(name, f) {
			t.FailNow()
		}
	}
	first := map[string]string{} // person → their first chat
	step("each person's requests reach one server", func(t *testing.T) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		for _, p := range persons {
			wg.Go(func() {
				got := chat(t, proxy, p, "", writeNote(note(on[p], p), "written by "+p+"\n"))
				if got.Status != http.StatusOK {
					t.Errorf("%s: %d %s", p, got.Status, got.Error)
				}
				mu.Lock()
				first[p] = got.SessionID
				mu.Unlock()
			})
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		for _, p := range persons {
			// A second request of each person: the same server again.
			if got := chat(t, proxy, p, first[p], "[[say again]]"); got.Status != http.StatusOK || got.SessionID != first[p] {
				t.Fatalf("%s's second message: %d %q, session %s (first %s)", p, got.Status, got.Error, got.SessionID, first[p])
			}
			other := b
			if on[p] == b {
				other = a
			}
			if ids := sessionsIn(on[p].state, p); len(ids) != 1 || ids[0] != first[p] {
				t.Fatalf("%s's chats on %s: %v, want [%s]", p, on[p].name, ids, first[p])
			}
			if ids := sessionsIn(other.state, p); len(ids) != 0 {
				t.Fatalf("%s has chats on %s too: %v", p, other.name, ids)
			}
		}
	})

	pa, pb := ofA[0], ofB[0]
	step("a notification's action link reaches its person's server", func(t *testing.T) {
		// A phone posts it with no header; the link names the person.
		const route = `"route":"/api/claude/actions/:token"`
		for _, p := range persons {
			other := b
			if on[p] == b {
				other = a
			}
			mine, theirs := strings.Count(on[p].logs.String(), route), strings.Count(other.logs.String(), route)
			resp, err := http.Post(proxy+"/api/claude/actions/not-a-token?person="+p, "application/json", nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusForbidden {
				t.Fatalf("%s's forged action: %s, want 403", p, resp.Status)
			}
			// The access line is written as the request ends.
			for deadline := time.Now().Add(10 * time.Second); strings.Count(on[p].logs.String(), route) == mine; time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%s's action link never reached %s", p, on[p].name)
				}
			}
			if n := strings.Count(other.logs.String(), route); n != theirs {
				t.Fatalf("%s's action link reached %s too", p, other.name)
			}
		}
	})

	step("a note written through one server is in the other's clone after its sync", func(t *testing.T) {
		// pb's notes were pushed by the second server before this write
		// of pa's on the first, which pulls first; and the other way.
		if got := chat(t, proxy, pb, first[pb], writeNote(note(b, pb), "written by "+pb+", again\n")); got.Status != http.StatusOK {
			t.Fatalf("%d %s", got.Status, got.Error)
		}
		if got := chat(t, proxy, pa, first[pa], writeNote(note(a, pa), "written by "+pa+", again\n")); got.Status != http.StatusOK {
			t.Fatalf("%d %s", got.Status, got.Error)
		}
		for _, p := range ofB {
			if body, err := os.ReadFile(note(a, p)); err != nil || !strings.Contains(string(body), "written by "+p) {
				t.Fatalf("%s's note in the first server's clone: %q, %v", p, body, err)
			}
		}
		if body, err := os.ReadFile(note(b, pa)); err != nil || !strings.Contains(string(body), "written by "+pa) {
			t.Fatalf("%s's note in the second server's clone: %q, %v", pa, body, err)
		}
	})

	step("a stopped server's persons go on on the other, with their notes", func(t *testing.T) {
		b.stop(t)
		for _, p := range ofB {
			input, _ := json.Marshal(map[string]string{"file_path": note(a, p)})
			got := chat(t, proxy, p, first[p], "[[tool Read "+string(input)+"]]")
			if got.Status != http.StatusOK || !strings.Contains(got.Response, "written by "+p) {
				t.Fatalf("%s after the stop: %d %q %s", p, got.Status, got.Error, got.Response)
			}
			if ids := sessionsIn(a.state, p); len(ids) != 1 {
				t.Fatalf("%s's chats on the first server: %v", p, ids)
			}
		}
	})

	archive := filepath.Join(dir, pb+".tar.gz")
	step("a person exported from a stopped server resumes on the other", func(t *testing.T) {
		if out, err := run(bin, "person", "export", "--state-dir", b.state, "--vault-root", b.vault, pb, archive); err != nil {
			t.Fatalf("export: %v\n%s", err, out)
		}
		if _, err := os.Stat(filepath.Join(b.state, "persons", pb)); err == nil {
			t.Fatal("the exported person's folder is still in place")
		}
		before := sessionsIn(a.state, pb)
		if out, err := run(bin, "person", "import", "--state-dir", a.state, archive); err == nil || !strings.Contains(out, "already has state") {
			t.Fatalf("import over the person's state: %v\n%s", err, out)
		}
		if got := sessionsIn(a.state, pb); len(got) != 1 || got[0] != before[0] {
			t.Fatalf("a refused import changed the person's chats: %v", got)
		}
		if out, err := run(bin, "person", "import", "--state-dir", a.state, "--replace", archive); err != nil {
			t.Fatalf("import --replace: %v\n%s", err, out)
		}
		got := chat(t, proxy, pb, first[pb], "[[recall]]")
		if got.Status != http.StatusOK || got.SessionID != first[pb] {
			t.Fatalf("the imported chat: %d %q, session %s", got.Status, got.Error, got.SessionID)
		}
		if !strings.Contains(got.Response, "written by "+pb+", again") {
			t.Fatalf("the CLI did not resume the conversation; the model heard: %s", got.Response)
		}
		if len(got.History) < 6 || !strings.Contains(got.History[0].Content, "written by "+pb) {
			t.Fatalf("the imported chat's history: %+v", got.History)
		}
	})

	step("bad archives are refused and leave nothing", func(t *testing.T) {
		whole, err := os.ReadFile(archive)
		if err != nil {
			t.Fatal(err)
		}
		var other bytes.Buffer
		gz := gzip.NewWriter(&other)
		tw := tar.NewWriter(gz)
		_ = tw.WriteHeader(&tar.Header{Name: "notes.txt", Mode: 0o600, Size: 2})
		_, _ = tw.Write([]byte("hi"))
		tw.Close()
		gz.Close()
		for name, data := range map[string][]byte{"cut off": whole[:len(whole)/2], "another format": other.Bytes()} {
			path := filepath.Join(t.TempDir(), "bad.tar.gz")
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := run(bin, "person", "import", "--state-dir", a.state, "--replace", path)
			if err == nil {
				t.Fatalf("%s: imported\n%s", name, out)
			}
			entries, _ := os.ReadDir(filepath.Join(a.state, "persons"))
			for _, e := range entries {
				if strings.HasPrefix(e.Name(), ".import") || strings.HasPrefix(e.Name(), ".replaced") {
					t.Fatalf("%s: left %s", name, e.Name())
				}
			}
			if got := chat(t, proxy, pb, first[pb], "[[say still here]]"); got.Status != http.StatusOK || got.SessionID != first[pb] {
				t.Fatalf("%s: the person's chat after a refused import: %d %q", name, got.Status, got.Error)
			}
		}
	})

	step("a person exported from a running server resumes on another", func(t *testing.T) {
		moved := filepath.Join(dir, pa+".tar.gz")
		if out, err := run(bin, "person", "export", "--state-dir", a.state, pa, moved); err != nil {
			t.Fatalf("export: %v\n%s", err, out)
		}
		got := chat(t, a.url, pa, first[pa], "[[say hello]]")
		if got.Status != http.StatusServiceUnavailable || got.Header.Get("Retry-After") == "" || !strings.Contains(got.Error, "moving") {
			t.Fatalf("the exported person on the server they left: %d %q, Retry-After %q", got.Status, got.Error, got.Header.Get("Retry-After"))
		}
		if out, err := run(bin, "person", "import", "--state-dir", b.state, moved); err != nil {
			t.Fatalf("import into a stopped server: %v\n%s", err, out)
		}
		b.start(t, bin)
		got = chat(t, b.url, pa, first[pa], "[[recall]]")
		if got.Status != http.StatusOK || got.SessionID != first[pa] || !strings.Contains(got.Response, "written by "+pa+", again") {
			t.Fatalf("the moved chat: %d %q, session %s, the model heard: %s", got.Status, got.Error, got.SessionID, got.Response)
		}
	})
}
