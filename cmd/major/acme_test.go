package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/majorhq/major/clitest"
)

// freeAddr is a loopback address with a port nobody listens on now.
func freeAddr(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// daemon runs a test server program in a process group of its own until
// the test ends.
func daemon(tb testing.TB, env []string, name string, args ...string) *clitest.Buffer {
	tb.Helper()
	bin, err := exec.LookPath(name)
	if err != nil {
		tb.Fatalf("%s is not installed: run bash scripts/install-debian-package.sh pebble %s (make test does)", name, name)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	logs := &clitest.Buffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	tb.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	})
	return logs
}

// TestACMECertificateFromATestCA: with --acme-domain the server gets its
// certificate from an ACME CA (Debian's pebble, a test CA, with its own
// DNS answering 127.0.0.1) at the first handshake for the name: the CA
// checks the HTTP-01 challenge the server answers on --acme-http-addr,
// which redirects other plain HTTP to HTTPS; the certificate is kept in
// the state directory.
func TestACMECertificateFromATestCA(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	apiCert, apiKey, apiPool := testCert(t, dir, 7)
	dns, challenge := freeAddr(t), freeAddr(t)
	_, challengePort, _ := net.SplitHostPort(challenge)
	directory, management := freeAddr(t), freeAddr(t)
	httpPort, _ := strconv.Atoi(challengePort)
	// Nothing answers the TLS-ALPN-01 challenge there: the server meets
	// the HTTP-01 one.
	_, unused, _ := net.SplitHostPort(freeAddr(t))
	tlsPort, _ := strconv.Atoi(unused)
	cfg, _ := json.Marshal(map[string]any{"pebble": map[string]any{
		"listenAddress": directory, "managementListenAddress": management,
		"certificate": apiCert, "privateKey": apiKey, "httpPort": httpPort, "tlsPort": tlsPort,
		"ocspResponderURL": "", "externalAccountBindingRequired": false,
	}})
	writeFile(t, filepath.Join(dir, "pebble.json"), string(cfg))
	daemon(t, nil, "pebble-challtestsrv", "-dns01", dns, "-http01", "", "-https01", "", "-tlsalpn01", "",
		"-management", freeAddr(t), "-defaultIPv4", "127.0.0.1", "-defaultIPv6", "")
	// No waits between validation attempts, and every nonce good.
	pebbleLogs := daemon(t, []string{"PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0"}, "pebble", "-config", filepath.Join(dir, "pebble.json"), "-dnsserver", dns)
	api := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: apiPool}}, Timeout: 10 * time.Second}
	waitFor(t, 20*time.Second, "pebble", func() bool {
		r, err := api.Get("https://" + directory + "/dir")
		if err == nil {
			r.Body.Close()
		}
		return err == nil && r.StatusCode == http.StatusOK
	})

	s := start(t, "--acme-domain", "notes.test", "--acme-directory", "https://"+directory+"/dir", "--acme-directory-ca", apiCert,
		"--acme-http-addr", challenge, "--addr", "127.0.0.1:0")
	// The CA's root, to check what the server serves against.
	r, err := api.Get("https://" + management + "/roots/0")
	if err != nil {
		t.Fatal(err)
	}
	rootPEM := readAll(t, r)
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(rootPEM)) {
		t.Fatalf("pebble's root: %s", rootPEM)
	}
	hostPort := strings.TrimPrefix(s.url, "https://")
	client := &http.Client{Timeout: 90 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "notes.test"},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, hostPort)
		},
	}}
	resp, err := client.Get("https://notes.test/healthz")
	if err != nil {
		t.Fatalf("HTTPS with the ACME certificate: %v\npebble:\n%s\nmajor:\n%s", err, pebbleLogs, s.logs)
	}
	readAll(t, resp)
	if leaf := resp.TLS.PeerCertificates[0]; resp.StatusCode != http.StatusOK || leaf.VerifyHostname("notes.test") != nil {
		t.Fatalf("status %d, certificate for %v", resp.StatusCode, leaf.DNSNames)
	}
	if _, err := os.Stat(filepath.Join(s.state, "acme", "notes.test")); err != nil {
		t.Fatalf("the certificate is not kept in the state directory: %v", err)
	}

	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, _ := http.NewRequest("GET", "http://"+challenge+"/app/", nil)
	req.Host = "notes.test"
	plain, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, plain)
	if loc := plain.Header.Get("Location"); plain.StatusCode/100 != 3 || !strings.HasPrefix(loc, "https://notes.test/app/") {
		t.Fatalf("plain HTTP on the challenge port: %d to %q", plain.StatusCode, loc)
	}
}
