package httpapi

import (
	"net/http/httptest"
	"testing"
)

// TestClientAddr: X-Forwarded-For is believed only from a trusted peer,
// and only for the hops trusted proxies appended: the client's address
// is the last one that is not a trusted proxy's.
func TestClientAddr(t *testing.T) {
	trusted, err := ParseTrustedProxies("127.0.0.1, ::1, 10.0.0.0/8")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{cfg: Config{TrustedProxies: trusted}}
	for _, tc := range []struct {
		name, peer string
		xff        []string
		want       string
	}{
		{"direct", "203.0.113.5:4000", nil, "203.0.113.5"},
		{"an untrusted peer's header is ignored", "203.0.113.5:4000", []string{"198.51.100.1"}, "203.0.113.5"},
		{"through a trusted proxy", "127.0.0.1:4000", []string{"198.51.100.1"}, "198.51.100.1"},
		{"a client's own entries before the proxy's are ignored", "127.0.0.1:4000", []string{"192.0.2.9, 198.51.100.1"}, "198.51.100.1"},
		{"through two trusted proxies", "127.0.0.1:4000", []string{"198.51.100.1, 10.1.2.3"}, "198.51.100.1"},
		{"several header lines", "[::1]:4000", []string{"192.0.2.9", "198.51.100.1"}, "198.51.100.1"},
		{"only trusted hops", "127.0.0.1:4000", []string{"10.1.2.3"}, "10.1.2.3"},
		{"garbage stops the walk", "127.0.0.1:4000", []string{"198.51.100.1, not-an-address"}, "127.0.0.1"},
		{"no header from a trusted peer", "127.0.0.1:4000", nil, "127.0.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tc.peer
			for _, v := range tc.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			if got := s.clientAddr(r); got != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
	for _, bad := range []string{"10.0.0.0/33", "example.org", "1.2.3"} {
		if _, err := ParseTrustedProxies(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}
