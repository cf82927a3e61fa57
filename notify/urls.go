package notify

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// ErrBadDevice is a device the server will not send to: a URL outside the
// rule, keys that do not parse, a kind it does not send.
var ErrBadDevice = errors.New("device refused")

// A device URL is one the server will POST to, so it is held to a rule:
// https only, no credentials in it, no host that names this machine or a
// private network (an address literal, "localhost", or a name that
// resolves to one when the send connects), unless its host is one the
// owner named (AllowHosts: tests, a self-hosted ntfy on loopback), which
// may also be plain http.

// hostRule is the URL rule with the owner's allowed hosts: "host" allows
// every port of it, "host:port" that port only.
type hostRule struct {
	allow []string
}

// allowed reports whether hostport ("host:port", as a URL's Host or a
// dial address) is one the owner named.
func (r hostRule) allowed(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.ToLower(strings.Trim(host, "[]"))
	for _, a := range r.allow {
		a = strings.ToLower(a)
		if a == host || a == strings.ToLower(hostport) {
			return true
		}
	}
	return false
}

// check parses raw as a URL a device may have.
func (r hostRule) check(raw string) (*url.URL, error) {
	if len(raw) > 2048 {
		return nil, fmt.Errorf("%w: the URL is longer than 2048 bytes", ErrBadDevice)
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Opaque != "" {
		return nil, fmt.Errorf("%w: %q is not an absolute URL", ErrBadDevice, raw)
	}
	if u.User != nil {
		return nil, fmt.Errorf("%w: the URL must not carry a user or password", ErrBadDevice)
	}
	if u.Fragment != "" {
		return nil, fmt.Errorf("%w: the URL must not have a #fragment", ErrBadDevice)
	}
	named := r.allowed(u.Host)
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && named:
	default:
		return nil, fmt.Errorf("%w: only https:// URLs are accepted", ErrBadDevice)
	}
	if !named {
		host := strings.ToLower(u.Hostname())
		if host == "localhost" || strings.HasSuffix(host, ".localhost") {
			return nil, fmt.Errorf("%w: %s names this machine", ErrBadDevice, u.Hostname())
		}
		if ip, err := netip.ParseAddr(host); err == nil && !public(ip) {
			return nil, fmt.Errorf("%w: %s is not a public address", ErrBadDevice, u.Hostname())
		}
	}
	return u, nil
}

// public reports whether ip is an address on the internet: not loopback,
// private, link-local, multicast or unspecified.
func public(ip netip.Addr) bool {
	ip = ip.Unmap()
	return ip.IsValid() && !ip.IsLoopback() && !ip.IsPrivate() && !ip.IsLinkLocalUnicast() && !ip.IsLinkLocalMulticast() &&
		!ip.IsMulticast() && !ip.IsUnspecified() && !ip.IsInterfaceLocalMulticast() &&
		!netip.MustParsePrefix("100.64.0.0/10").Contains(ip) // carrier-grade NAT
}

// maxResponse is as much of a push service's answer as is read.
const maxResponse = 64 << 10

// sendClient is the HTTP client of sends: each bounded by timeout, no
// redirect to another host (and at most two on the same one), and, when
// rule is not nil, connections only to public addresses unless the host
// is one the owner named (a name that resolves to this machine is refused
// when it connects, so DNS cannot walk around the rule).
func sendClient(rule *hostRule, timeout time.Duration) *http.Client {
	dialer := &net.Dialer{Timeout: min(timeout, 10*time.Second)}
	guarded := &net.Dialer{Timeout: dialer.Timeout, Control: func(network, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil || !public(ap.Addr()) {
			return fmt.Errorf("%w: %s is not a public address", ErrBadDevice, address)
		}
		return nil
	}}
	transport := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if rule == nil || rule.allowed(addr) {
				return dialer.DialContext(ctx, network, addr)
			}
			return guarded.DialContext(ctx, network, addr)
		},
		TLSHandshakeTimeout:   dialer.Timeout,
		ResponseHeaderTimeout: timeout,
		MaxIdleConnsPerHost:   2,
		IdleConnTimeout:       90 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	return &http.Client{
		Timeout:   timeout,
		Transport: transport,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			first := via[0].URL
			if req.URL.Scheme != first.Scheme || !strings.EqualFold(req.URL.Host, first.Host) {
				return fmt.Errorf("%w: redirected to another host (%s)", ErrBadDevice, req.URL.Host)
			}
			if len(via) > 2 {
				return errors.New("too many redirects")
			}
			return nil
		},
	}
}

// drain reads at most maxResponse of an answer and closes it, so the
// connection can be used again; it returns the start of the answer, for
// errors.
func drain(resp *http.Response) string {
	defer resp.Body.Close()
	head := make([]byte, 512)
	n, _ := io.ReadFull(resp.Body, head)
	_, _ = io.CopyN(io.Discard, resp.Body, maxResponse-int64(n))
	return strings.TrimSpace(string(head[:n]))
}

// statusError is a send the service answered with an error status.
type statusError struct {
	status int
	body   string
}

func (e *statusError) Error() string {
	if e.body == "" {
		return fmt.Sprintf("the service answered %d", e.status)
	}
	return fmt.Sprintf("the service answered %d: %s", e.status, oneLine(e.body, 200))
}

// errGone is a device the service says no longer exists: it is removed.
var errGone = errors.New("the service says this device no longer exists")
