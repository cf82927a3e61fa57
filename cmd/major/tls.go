package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/crypto/acme"
	"golang.org/x/crypto/acme/autocert"
)

// certFiles serves a certificate and key from files and reads them again
// when they change, so a certificate renewed by another tool (certbot, a
// company CA's agent) is served without a restart. A pair that does not
// load keeps the last good one and says so in the log.
type certFiles struct {
	certPath, keyPath string
	log               zerolog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   [2]fileStamp
	checked time.Time
}

// fileStamp tells a changed file from the one read before.
type fileStamp struct {
	size  int64
	mtime time.Time
}

func stamp(path string) fileStamp {
	st, err := os.Stat(path)
	if err != nil {
		return fileStamp{}
	}
	return fileStamp{st.Size(), st.ModTime()}
}

// loadCertFiles loads the pair once: a pair that does not load at start
// is an error naming the flags.
func loadCertFiles(certPath, keyPath string, log zerolog.Logger) (*certFiles, error) {
	c := &certFiles{certPath: certPath, keyPath: keyPath, log: log}
	cert, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
	}
	c.cert, c.stamp = &cert, [2]fileStamp{stamp(certPath), stamp(keyPath)}
	return c, nil
}

// getCertificate is tls.Config.GetCertificate: the pair, read again if
// either file changed (looked at once a second at most).
func (c *certFiles) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := time.Now(); now.Sub(c.checked) >= time.Second {
		c.checked = now
		if st := [2]fileStamp{stamp(c.certPath), stamp(c.keyPath)}; st != c.stamp {
			cert, err := tls.LoadX509KeyPair(c.certPath, c.keyPath)
			if err != nil {
				// A renewal tool may have written one file of the two.
				c.log.Warn().Err(err).Msg("the TLS certificate changed but does not load (yet); serving the one before")
			} else {
				c.cert, c.stamp = &cert, st
				c.log.Info().Str("cert", c.certPath).Msg("the TLS certificate changed; serving the new one")
			}
		}
	}
	return c.cert, nil
}

// tlsSetup is how the server serves HTTPS, if it does.
type tlsSetup struct {
	config *tls.Config
	// challenge serves ACME's HTTP-01 challenge (and redirects the rest to
	// HTTPS) on challengeAddr; nil without ACME.
	challenge     http.Handler
	challengeAddr string
}

// setupTLS builds the TLS configuration the flags ask for: certificate
// files, or certificates from an ACME CA (Let's Encrypt by default) kept
// in the state directory; nil for plain HTTP.
func setupTLS(cfg config, log zerolog.Logger) (*tlsSetup, error) {
	// HTTP/1.1 only: the terminal's WebSocket is an HTTP/1.1 upgrade.
	base := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}
	switch {
	case cfg.TLSCert != "":
		files, err := loadCertFiles(cfg.TLSCert, cfg.TLSKey, log)
		if err != nil {
			return nil, err
		}
		base.GetCertificate = files.getCertificate
		return &tlsSetup{config: base}, nil
	case len(cfg.ACMEDomains) > 0:
		cache := filepath.Join(cfg.StateDir, "acme")
		if err := os.MkdirAll(cache, 0o700); err != nil {
			return nil, fmt.Errorf("acme cache: %w", err)
		}
		m := &autocert.Manager{
			Prompt:     autocert.AcceptTOS,
			HostPolicy: autocert.HostWhitelist(cfg.ACMEDomains...),
			Cache:      autocert.DirCache(cache),
			Email:      cfg.ACMEEmail,
		}
		if cfg.ACMEDirectory != "" {
			m.Client = &acme.Client{DirectoryURL: cfg.ACMEDirectory}
		}
		if cfg.ACMEDirectoryCA != "" {
			client, err := trustingClient(cfg.ACMEDirectoryCA)
			if err != nil {
				return nil, fmt.Errorf("--acme-directory-ca: %w", err)
			}
			if m.Client == nil {
				m.Client = &acme.Client{DirectoryURL: autocert.DefaultACMEDirectory}
			}
			m.Client.HTTPClient = client
		}
		base.GetCertificate = m.GetCertificate
		// The TLS-ALPN-01 challenge needs its protocol offered too.
		base.NextProtos = append(base.NextProtos, acme.ALPNProto)
		return &tlsSetup{config: base, challenge: hostWithoutPort(m.HTTPHandler(nil)), challengeAddr: cfg.ACMEHTTPAddr}, nil
	}
	return nil, nil
}

// serveChallenge serves ACME's HTTP-01 challenge on its own listener
// until the function it returns is called.
func serveChallenge(ln net.Listener, h http.Handler, log zerolog.Logger) func() {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, IdleTimeout: time.Minute, ErrorLog: debugLog(log)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Msg("the ACME challenge server stopped")
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}
}

// loopback reports whether addr ("host:port") only listens on loopback.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// trustingClient is an HTTP client that trusts the CA certificates in
// the PEM file at path beside the system's.
func trustingClient(path string) (*http.Client, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return &http.Client{Transport: t, Timeout: time.Minute}, nil
}

// hostWithoutPort passes requests on with the port taken off their Host:
// the CA asks for a challenge with the port in Host when it is not 80
// (a test CA, a forwarded port), and the host policy knows names only.
func hostWithoutPort(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if host, _, err := net.SplitHostPort(r.Host); err == nil {
			r.Host = host
		}
		h.ServeHTTP(w, r)
	})
}
