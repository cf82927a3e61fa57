package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// authFileOf is the token file the server was started with.
func (s *server) authFileOf(tb testing.TB) string {
	tb.Helper()
	for i, a := range s.args {
		if a == "--auth-file" && i+1 < len(s.args) {
			return s.args[i+1]
		}
	}
	tb.Fatal("no --auth-file")
	return ""
}

// reqWith is a request with token acting as person.
func (s *server) reqWith(tb testing.TB, token, person, method, path, body string) *http.Response {
	tb.Helper()
	req, _ := http.NewRequest(method, s.url+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("X-Notes-Person", person)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	return resp
}

// majorToken runs `major token ...` and returns its output.
func majorToken(tb testing.TB, args ...string) string {
	tb.Helper()
	var out, errOut strings.Builder
	if err := run(context.Background(), append([]string{"token"}, args...), nil, &out, &errOut); err != nil {
		tb.Fatalf("major token %v: %v\n%s", args, err, errOut.String())
	}
	return out.String()
}

// TestTokenAddUseRevokeWithoutRestart: a token added with `major token
// add` while the server runs works at once, shows by name in the list
// and the access log (never itself), and once revoked is refused from the
// next request on while its open events stream is closed; the file never
// holds a token in plain text after the first change.
func TestTokenAddUseRevokeWithoutRestart(t *testing.T) {
	t.Parallel()
	s := start(t)
	file := s.authFileOf(t)
	out := majorToken(t, "add", "--auth-file", file, "--person", "sebastian", "--name", "Pixel 8")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	tok := lines[len(lines)-1]
	if !strings.HasPrefix(tok, "mj_") || strings.Contains(tok, " ") {
		t.Fatalf("the last line is not the token alone:\n%s", out)
	}
	disk, _ := os.ReadFile(file)
	if strings.Contains(string(disk), tok) || strings.Contains(string(disk), testToken) {
		t.Fatalf("a token in plain text on disk:\n%s", disk)
	}

	resp := s.reqWith(t, tok, "sebastian", "POST", "/api/claude/sessions", "")
	var created struct{ ID string }
	if err := json.Unmarshal([]byte(readAll(t, resp)), &created); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("the new token at once: %d %v", resp.StatusCode, err)
	}
	if r := s.reqWith(t, tok, "petra", "GET", "/api/claude/sessions", ""); r.StatusCode != http.StatusForbidden {
		t.Fatalf("as another person: %d", r.StatusCode)
	}
	list := majorToken(t, "list", "--auth-file", file)
	if !strings.Contains(list, "Pixel 8") || !strings.Contains(list, "sebastian") || strings.Contains(list, tok) {
		t.Fatalf("list:\n%s", list)
	}

	events := s.reqWith(t, tok, "sebastian", "GET", "/api/claude/sessions/"+created.ID+"/events", "")
	defer events.Body.Close()
	ended := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, events.Body)
		ended <- err
	}()

	majorToken(t, "revoke", "--auth-file", file, "Pixel 8")
	if r := s.reqWith(t, tok, "sebastian", "GET", "/api/claude/sessions", ""); r.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a revoked token on the next request: %d", r.StatusCode)
	}
	select {
	case <-ended:
	case <-time.After(20 * time.Second):
		t.Fatal("the revoked token's events stream is still open")
	}
	if r := s.req(t, "GET", "/api/claude/sessions", ""); r.StatusCode != http.StatusOK {
		t.Fatalf("the other token after the revoke: %d", r.StatusCode)
	}
	logs := s.logs.String()
	if !strings.Contains(logs, `"token_name":"Pixel 8"`) || !strings.Contains(logs, `"took_ms":`) {
		t.Fatal("no access line names the token")
	}
	if strings.Contains(logs, tok) || strings.Contains(logs, testToken) {
		t.Fatal("a token in the log")
	}
}

// TestFailedSignInsAreLimited: wrong tokens from one address are answered
// 401 until its attempts are used up, then 429 with Retry-After, the
// right token too (a guesser learns nothing more); other addresses (as a
// trusted proxy says) are not held up, and no wrong token is logged.
func TestFailedSignInsAreLimited(t *testing.T) {
	t.Parallel()
	s := start(t, "--trusted-proxies", "127.0.0.1")
	get := func(token, forwardedFor string) *http.Response {
		req, _ := http.NewRequest("GET", s.url+"/api/claude/sessions", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("X-Notes-Person", "sebastian")
		req.Header.Set("X-Forwarded-For", forwardedFor)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		return resp
	}
	for i := range 10 {
		if r := get("guess-"+string(rune('a'+i)), "203.0.113.7"); r.StatusCode != http.StatusUnauthorized {
			t.Fatalf("guess %d: %d", i, r.StatusCode)
		}
	}
	for _, tc := range []struct {
		name, token, from string
		want              int
	}{
		{"one guess more", "guess-z", "203.0.113.7", http.StatusTooManyRequests},
		{"the right token from there", testToken, "203.0.113.7", http.StatusTooManyRequests},
		{"the right token from elsewhere", testToken, "198.51.100.1", http.StatusOK},
		{"a spoofed hop before the client's", testToken, "198.51.100.1, 203.0.113.7", http.StatusTooManyRequests},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := get(tc.token, tc.from)
			if r.StatusCode != tc.want {
				t.Fatalf("status %d, want %d", r.StatusCode, tc.want)
			}
			if tc.want == http.StatusTooManyRequests && r.Header.Get("Retry-After") == "" {
				t.Fatal("429 without Retry-After")
			}
		})
	}
	logs := s.logs.String()
	if strings.Contains(logs, "guess-") || !strings.Contains(logs, `"client":"203.0.113.7"`) {
		t.Fatal("the log holds a token, or no failure names its client")
	}
}

// TestPairingThroughTheAPI: a signed-in person makes a pairing code; a
// device redeems it once for a token of its own (named, for that person
// only), which the person lists and revokes; a second redeem fails.
func TestPairingThroughTheAPI(t *testing.T) {
	t.Parallel()
	s := start(t)
	var p struct {
		Code, URL, Server, QRPNG string `json:"-"`
	}
	var raw map[string]string
	resp := s.req(t, "POST", "/api/claude/pairings", `{"name":"Tablet"}`)
	if err := json.Unmarshal([]byte(readAll(t, resp)), &raw); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("pairing: %d %v", resp.StatusCode, err)
	}
	p.Code, p.URL, p.Server, p.QRPNG = raw["code"], raw["url"], raw["server"], raw["qr_png"]
	if p.URL != s.url+"/app/#pair="+p.Code || p.QRPNG == "" {
		t.Fatalf("pairing answer: %v", raw)
	}
	redeem := func(code string) *http.Response {
		r, err := http.Post(s.url+"/api/claude/pair", "application/json", strings.NewReader(`{"code":"`+code+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := redeem(strings.ToLower(p.Code))
	var got struct{ Token, Name, Person, Server string }
	if err := json.Unmarshal([]byte(readAll(t, r)), &got); err != nil || r.StatusCode != http.StatusCreated {
		t.Fatalf("redeem: %d %v", r.StatusCode, err)
	}
	if got.Name != "Tablet" || got.Person != "sebastian" || got.Server != s.url {
		t.Fatalf("redeemed: %+v", got)
	}
	if r := redeem(p.Code); r.StatusCode != http.StatusUnauthorized {
		t.Fatalf("second redeem: %d", r.StatusCode)
	}
	if r := s.reqWith(t, got.Token, "sebastian", "GET", "/api/claude/sessions", ""); r.StatusCode != http.StatusOK {
		t.Fatalf("the device's token: %d", r.StatusCode)
	}
	list := readAll(t, s.reqWith(t, got.Token, "sebastian", "GET", "/api/claude/tokens", ""))
	if !strings.Contains(list, `"name":"Tablet"`) || !strings.Contains(list, `"current":true`) || strings.Contains(list, got.Token) {
		t.Fatalf("tokens: %s", list)
	}
	if r := s.req(t, "DELETE", "/api/claude/tokens/"+strings.Split(strings.Split(list, `"name":"token-`)[1], `"`)[0], ""); r.StatusCode != http.StatusNotFound && r.StatusCode != http.StatusForbidden {
		t.Fatalf("revoking the shared token as a person: %d", r.StatusCode)
	}
	if r := s.req(t, "DELETE", "/api/claude/tokens/Tablet", ""); r.StatusCode != http.StatusOK {
		t.Fatalf("revoke: %d", r.StatusCode)
	}
	if r := s.reqWith(t, got.Token, "sebastian", "GET", "/api/claude/sessions", ""); r.StatusCode != http.StatusUnauthorized {
		t.Fatalf("the revoked device: %d", r.StatusCode)
	}
}

// testCert makes a certificate for 127.0.0.1 signed by ca (self-signed
// when ca is nil), as PEM files in dir.
func testCert(tb testing.TB, dir string, serial int64) (certPath, keyPath string, pool *x509.CertPool) {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "major test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	certPath, keyPath = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	// Written beside and renamed, as a renewal tool does.
	for path, block := range map[string]*pem.Block{certPath: {Type: "CERTIFICATE", Bytes: der}, keyPath: {Type: "EC PRIVATE KEY", Bytes: keyDER}} {
		writeFile(tb, path+".new", string(pem.EncodeToMemory(block)))
		if err := os.Rename(path+".new", path); err != nil {
			tb.Fatal(err)
		}
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certPath, keyPath, pool
}

// TestTLSWithACertificateRenewedOnDisk: with --tls-cert and --tls-key the
// server speaks HTTPS only, HTTP/1.1 (the terminal's WebSocket needs it),
// and serves a certificate replaced on disk without a restart.
func TestTLSWithACertificateRenewedOnDisk(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certPath, keyPath, first := testCert(t, dir, 1)
	s := start(t, "--tls-cert", certPath, "--tls-key", keyPath)
	if !strings.HasPrefix(s.url, "https://") {
		t.Fatalf("serving at %s", s.url)
	}
	served := func(pool *x509.CertPool) (*http.Response, error) {
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
		defer client.CloseIdleConnections()
		req, _ := http.NewRequest("GET", s.url+"/api/claude/sessions", nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		req.Header.Set("X-Notes-Person", "sebastian")
		resp, err := client.Do(req)
		if err == nil {
			readAll(t, resp)
		}
		return resp, err
	}
	resp, err := served(first)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.TLS == nil || resp.Proto != "HTTP/1.1" || resp.TLS.PeerCertificates[0].SerialNumber.Int64() != 1 {
		t.Fatalf("over TLS: %d %s", resp.StatusCode, resp.Proto)
	}
	plain, err := http.Get(strings.Replace(s.url, "https://", "http://", 1) + "/healthz")
	if err == nil {
		readAll(t, plain)
		if plain.StatusCode == http.StatusOK {
			t.Fatal("plain HTTP answered on the TLS port")
		}
	}

	_, _, second := testCert(t, dir, 2)
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := served(second)
		if err == nil && resp.TLS.PeerCertificates[0].SerialNumber.Int64() == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the renewed certificate is not served: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(s.logs.String(), "the TLS certificate changed; serving the new one") {
		t.Fatal("the renewal is not logged")
	}
}

// TestPlainHTTPOffLoopbackIsWarnedAbout: the flags decide where and how
// the server listens: loopback by default, a warning for plain HTTP
// anywhere else, :443 for ACME, and mistakes refused.
func TestListenFlags(t *testing.T) {
	base := []string{"--vault-root", "/v", "--auth-file", "/a"}
	for _, tc := range []struct {
		name    string
		args    []string
		addr    string
		wantErr string
	}{
		{"loopback by default", nil, "127.0.0.1:8080", ""},
		{"acme takes 443", []string{"--acme-domain", "notes.example.org"}, ":443", ""},
		{"acme on a given port", []string{"--acme-domain", "notes.example.org", "--addr", ":8443"}, ":8443", ""},
		{"cert without key", []string{"--tls-cert", "c.pem"}, "", "go together"},
		{"cert and acme", []string{"--tls-cert", "c", "--tls-key", "k", "--acme-domain", "x.org"}, "", "exclude each other"},
		{"bad proxy", []string{"--trusted-proxies", "10.0.0.0/33"}, "", "--trusted-proxies"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseFlags(append(base, tc.args...), func(string) string { return "" }, io.Discard)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || c.Addr != tc.addr {
				t.Fatalf("addr %q, %v; want %q", c.Addr, err, tc.addr)
			}
		})
	}
	for addr, want := range map[string]bool{"127.0.0.1:1": true, "[::1]:1": true, "localhost:1": true, "0.0.0.0:1": false, ":8080": false, "192.0.2.1:80": false} {
		if loopback(addr) != want {
			t.Errorf("loopback(%q) = %v", addr, !want)
		}
	}
}

// TestBackupWhileServing: `major backup` copies the state directory while
// the server runs: each session's index entry and its event log up to the
// last complete line, no process records; a restarted server on the copy
// has the chat.
func TestBackupWhileServing(t *testing.T) {
	t.Parallel()
	s := start(t)
	var chat struct {
		SessionID string `json:"session_id"`
	}
	if err := json.Unmarshal([]byte(readAll(t, s.req(t, "POST", "/api/claude/chat", `{"message":"[[say kept safe]]"}`))), &chat); err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(t.TempDir(), "backup")
	var out, errOut strings.Builder
	if err := run(context.Background(), []string{"backup", "--state-dir", s.state, dest}, nil, &out, &errOut); err != nil {
		t.Fatalf("backup: %v\n%s", err, errOut.String())
	}
	log, err := os.ReadFile(filepath.Join(dest, "persons", "sebastian", "sessions", chat.SessionID, "events.ndjson"))
	if err != nil || !strings.Contains(string(log), "kept safe") || !strings.HasSuffix(string(log), "\n") {
		t.Fatalf("the copied log: %v\n%s", err, log)
	}
	if _, err := os.Stat(filepath.Join(dest, "pids")); !os.IsNotExist(err) {
		t.Fatalf("process records copied: %v", err)
	}
	if err := run(context.Background(), []string{"backup", "--state-dir", s.state, dest}, nil, io.Discard, io.Discard); err == nil {
		t.Fatal("a backup over an existing folder")
	}
	s.stop(t)
	if lines := strings.Split(strings.TrimSpace(s.logs.String()), "\n"); !strings.Contains(lines[len(lines)-1], `"message":"major has stopped"`) {
		t.Fatalf("the last log line: %s", lines[len(lines)-1])
	}
	restored := launch(t, s.env, s.li, dest, withArg(s.args, "--state-dir", dest), s.environ)
	hist := readAll(t, restored.req(t, "GET", "/api/claude/history?session_id="+chat.SessionID, ""))
	if !strings.Contains(hist, "kept safe") {
		t.Fatalf("history on the restored state: %s", hist)
	}
}
