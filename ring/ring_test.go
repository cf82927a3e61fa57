package ring

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// haproxy starts haproxy on cfg (with {{servers}} and {{port}} filled
// in) and returns its address.
func haproxy(tb testing.TB, cfg string) string {
	tb.Helper()
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		bin = "/usr/sbin/haproxy"
		if _, err := os.Stat(bin); err != nil {
			tb.Fatal("haproxy is not installed: run scripts/install-haproxy.sh (make test does)")
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg = strings.ReplaceAll(cfg, "{{addr}}", addr)
	path := filepath.Join(tb.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(bin, "-db", "-f", path)
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr
		}
		if time.Now().After(deadline) {
			tb.Fatalf("haproxy did not listen:\n%s", logs.String())
		}
	}
}

// The ring places every person where a real haproxy sends them, for
// servers numbered by HAProxy, numbered by hand, and weighted.
func TestRingIsHAProxys(t *testing.T) {
	tests := []struct {
		name    string
		servers []string // server lines' options, one per server
	}{
		{"two", []string{"", ""}},
		{"three", []string{"", "", ""}},
		{"ids by hand and a gap", []string{"id 7", "", "id 2"}},
		{"weights", []string{"weight 3", "", "weight 2"}},
		{"one disabled", []string{"", "disabled", ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var lines strings.Builder
			for i, opts := range tt.servers {
				name := fmt.Sprintf("s%d", i+1)
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, name) }))
				t.Cleanup(srv.Close)
				fmt.Fprintf(&lines, "    server %s %s %s\n", name, strings.TrimPrefix(srv.URL, "http://"), opts)
			}
			cfg := "defaults\n    mode http\n    timeout connect 5s\n    timeout client 30s\n    timeout server 30s\n" +
				"frontend f\n    bind {{addr}}\n    default_backend persons\n" +
				"backend persons\n    balance hdr(X-Notes-Person)\n    hash-type consistent\n" + lines.String()
			addr := haproxy(t, cfg)
			servers, err := parseConfig(strings.NewReader(cfg))
			if err != nil {
				t.Fatal(err)
			}
			r, err := New(servers)
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]int{}
			for i := 0; i < 300; i++ {
				person := fmt.Sprintf("person%d", i)
				if i%3 == 0 {
					person = fmt.Sprintf("p%c%d-x", 'a'+i%26, i*7919)
				}
				req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
				req.Header.Set(Header, person)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if got, want := string(b), r.Server(person); got != want {
					t.Fatalf("haproxy sent %s to %s, the ring says %s", person, got, want)
				}
				seen[string(b)]++
			}
			if len(seen) < 2 {
				t.Fatalf("all persons went to one server: %v", seen)
			}
		})
	}
}
