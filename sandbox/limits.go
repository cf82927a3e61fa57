package sandbox

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// Limits bound what one person's sandboxes may take of the machine, so
// that no person can starve the others or the server. A zero field is no
// limit.
type Limits struct {
	// FileSize is the largest file, in bytes, a process in the sandbox
	// may write (RLIMIT_FSIZE): a larger write fails. It keeps a person
	// from making files the server's git must then read whole (a sparse
	// file of a terabyte costs no disk, but every sync hashes it).
	FileSize int64
	// Processes is how many processes all of one person's sandboxes may
	// run together (a pids cgroup of the person's): a fork bomb stops
	// there, and the host keeps its process ids for everyone else.
	Processes int
}

// groups are the per-person pids cgroups, made under the server's own
// cgroup in the pids hierarchy it can write (cgroup v1's pids controller,
// or a cgroup v2 tree delegated to the server, such as systemd's
// Delegate=pids). The zero value makes none.
type groups struct {
	// root is the folder the persons' groups are made in; "" when no
	// pids cgroup can be made here.
	root string
	max  int
}

// DefaultLimits are the limits a server starts with: files up to 1 GiB,
// 512 processes (threads counted) per person.
var DefaultLimits = Limits{FileSize: 1 << 30, Processes: 512}

// newGroups finds where per-person pids groups can be made and checks
// that one can; it reports why not otherwise. name tells one server's
// groups from another's on the same machine (its state directory).
func newGroups(max int, base, name string) (groups, error) {
	if max <= 0 {
		return groups{}, nil
	}
	if base == "" {
		var err error
		if base, err = pidsCgroup(); err != nil {
			return groups{}, err
		}
	}
	sum := sha256.Sum256([]byte(name))
	root := filepath.Join(base, "major-"+hex.EncodeToString(sum[:6]))
	if err := os.MkdirAll(root, 0o755); err != nil {
		return groups{}, fmt.Errorf("make a pids cgroup: %w", err)
	}
	g := groups{root: root, max: max}
	if _, err := g.procs("probe"); err != nil {
		return groups{}, err
	}
	return g, nil
}

// close removes the persons' groups that no process is in any more, and
// the server's folder of them if it is empty then.
func (g groups) close() {
	if g.root == "" {
		return
	}
	entries, _ := os.ReadDir(g.root)
	for _, e := range entries {
		if e.IsDir() {
			_ = os.Remove(filepath.Join(g.root, e.Name()))
		}
	}
	_ = os.Remove(g.root)
}

// procs is the cgroup.procs file of person's group, made (with its
// pids.max) if need be.
func (g groups) procs(person string) (string, error) {
	if g.root == "" {
		return "", nil
	}
	if person == "" {
		person = "_"
	}
	dir := filepath.Join(g.root, person)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("make the pids cgroup of %s: %w", person, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte(strconv.Itoa(g.max)), 0o644); err != nil {
		return "", fmt.Errorf("limit the processes of %s: %w", person, err)
	}
	return filepath.Join(dir, "cgroup.procs"), nil
}

// pidsCgroup is the server's own cgroup in a pids hierarchy it may make
// groups in: cgroup v1's pids controller, else a v2 cgroup whose
// subtree_control enables pids (delegated to the server).
func pidsCgroup() (string, error) {
	own := map[string]string{} // controller (or "" for v2) → path
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	defer f.Close()
	lines := bufio.NewScanner(f)
	for lines.Scan() {
		parts := strings.SplitN(lines.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			own[c] = parts[2]
		}
	}
	if p, ok := own["pids"]; ok {
		// cgroup v1: the pids hierarchy, where it is mounted.
		mount := "/sys/fs/cgroup/pids"
		if _, err := os.Stat(filepath.Join(mount, "cgroup.procs")); err == nil {
			return filepath.Join(mount, p), nil
		}
	}
	if p, ok := own[""]; ok {
		if dir, err := delegated(filepath.Join("/sys/fs/cgroup", p)); err == nil {
			return dir, nil
		}
	}
	return "", errors.New("no pids cgroup the server may make groups in (cgroup v1's pids controller, or a cgroup v2 tree delegated to the server with pids enabled, as systemd's Delegate=pids gives)")
}

// delegated makes dir, the server's cgroup v2 (delegated to it, as
// systemd's Delegate=pids does), one its groups can go in: a cgroup with
// processes cannot give controllers to groups below it, so the server
// first moves into a group of its own below dir ("server"), then turns
// pids on for dir's groups.
func delegated(dir string) (string, error) {
	if b, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control")); err == nil && strings.Contains(string(b), "pids") {
		return dir, nil
	}
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil || !strings.Contains(string(b), "pids") {
		return "", errors.New("pids is not delegated")
	}
	server := filepath.Join(dir, "server")
	if err := os.Mkdir(server, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(server, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+pids"), 0o644); err != nil {
		return "", err
	}
	return dir, nil
}

// wrap is the command that runs argv (bwrap and its options) in
// person's pids group and under the file size limit: the shell puts
// itself in the group, then becomes prlimit, which sets the limit and
// becomes argv, all in one process, so nothing runs outside them.
func (s *Sandbox) wrap(person string, argv []string) []string {
	var pre []string
	if procs, err := s.groups.procs(person); err == nil && procs != "" {
		pre = append(pre, "/bin/sh", "-c", `echo $$ > "$0" && exec "$@"`, procs)
	}
	if s.limits.FileSize > 0 && s.prlimit != "" {
		pre = append(pre, s.prlimit, "--fsize="+strconv.FormatInt(s.limits.FileSize, 10), "--")
	}
	return append(pre, argv...)
}

// findPrlimit is util-linux's prlimit, which sets the file size limit;
// "" without it.
func findPrlimit(path string) string {
	p, err := find("prlimit", path)
	if err != nil {
		if p, err = exec.LookPath("/usr/bin/prlimit"); err != nil {
			return ""
		}
	}
	return p
}
