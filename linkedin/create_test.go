package linkedin_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/majorhq/major/linkedin"
	"github.com/majorhq/major/linkedin/linkedintest"
)

// creates counts the POSTs the fake received.
func creates(api *linkedintest.Server) int {
	n := 0
	for _, r := range api.Requests() {
		if r.Method == http.MethodPost {
			n++
		}
	}
	return n
}

// TestCreateNeverPublishesTwice: after an answer that leaves open whether
// LinkedIn applied a create, the client never sends it again: a lookup
// that finds it proves success, anything else is "outcome unknown",
// whether LinkedIn applied it or not, and however late it lists it.
func TestCreateNeverPublishesTwice(t *testing.T) {
	t.Parallel()
	const post = "urn:li:activity:555"
	kinds := []struct {
		name   string
		create func(ctx context.Context, c *linkedin.Client, text string) (string, error)
		stored func(api *linkedintest.Server) []string
	}{
		{"post", func(ctx context.Context, c *linkedin.Client, text string) (string, error) {
			return c.CreatePost(ctx, seb, text)
		}, func(api *linkedintest.Server) []string {
			var out []string
			for _, p := range api.Posts() {
				out = append(out, p.Commentary)
			}
			return out
		}},
		{"comment", func(ctx context.Context, c *linkedin.Client, text string) (string, error) {
			return c.CreateComment(ctx, seb, post, text)
		}, func(api *linkedintest.Server) []string { return api.Comments(post) }},
		{"reply", func(ctx context.Context, c *linkedin.Client, text string) (string, error) {
			return c.ReplyToComment(ctx, seb, post, "urn:li:comment:(urn:li:activity:555,1)", text)
		}, func(api *linkedintest.Server) []string { return api.Comments("urn:li:comment:(urn:li:activity:555,1)") }},
	}
	cases := []struct {
		name       string
		script     []linkedintest.Response
		lag        time.Duration // how long LinkedIn takes to list what it created
		wantStored int
		wantErr    string // "" means success
		wantPosts  int    // POST requests sent
	}{
		{name: "applied then 504", script: []linkedintest.Response{{Status: 504, Apply: true}},
			wantStored: 1, wantPosts: 1},
		{name: "applied then 500", script: []linkedintest.Response{{Status: 500, Apply: true}},
			wantStored: 1, wantPosts: 1},
		{name: "applied then 502, listed 3 s later: outcome unknown, never sent again", script: []linkedintest.Response{{Status: 502, Apply: true, Method: "POST"}},
			lag: 3 * time.Second, wantStored: 1, wantPosts: 1, wantErr: "outcome unknown"},
		{name: "not applied, 504: outcome unknown, not sent again", script: []linkedintest.Response{{Status: 504}},
			wantStored: 0, wantPosts: 1, wantErr: "outcome unknown"},
		{name: "lookup fails: outcome unknown, no resend", script: []linkedintest.Response{{Status: 504, Apply: true}, {Status: 401, Method: "GET"}},
			wantStored: 1, wantPosts: 1, wantErr: "outcome unknown"},
		{name: "lookup fails on a post not applied: no resend", script: []linkedintest.Response{{Status: 504}, {Status: 403, Method: "GET"}},
			wantStored: 0, wantPosts: 1, wantErr: "outcome unknown"},
		{name: "lookup keeps failing with 5xx: no resend", script: []linkedintest.Response{{Status: 504}, {Status: 503, Method: "GET"}, {Status: 503, Method: "GET"}, {Status: 503, Method: "GET"}, {Status: 503, Method: "GET"}},
			wantStored: 0, wantPosts: 1, wantErr: "outcome unknown"},
		{name: "429 proves nothing applied: resent", script: []linkedintest.Response{{Status: 429}, {Status: 429}},
			wantStored: 1, wantPosts: 3},
	}
	for _, k := range kinds {
		for _, tc := range cases {
			t.Run(k.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				f := newFixture(t, nil)
				// Other entries by the same author and others, over more
				// than one page of the lookup.
				for i := range 120 {
					if k.name == "post" {
						if _, err := f.client.CreatePost(context.Background(), seb, fmt.Sprintf("older %d", i)); err != nil {
							t.Fatal(err)
						}
					} else {
						thread := post
						if k.name == "reply" {
							thread = "urn:li:comment:(urn:li:activity:555,1)"
						}
						f.api.AddComment(thread, "urn:li:person:other", "same text")
					}
				}
				before := len(k.stored(f.api))
				sent := creates(f.api)
				f.api.SetListingLag(tc.lag)
				f.api.Enqueue(tc.script...)
				urn, err := k.create(context.Background(), f.client, "same text")
				stored := k.stored(f.api)[before:]
				if len(stored) != tc.wantStored {
					t.Fatalf("published %d times: %q (err %v)", len(stored), stored, err)
				}
				if got := creates(f.api) - sent; got != tc.wantPosts {
					t.Errorf("sent %d creates, want %d", got, tc.wantPosts)
				}
				if tc.wantErr == "" {
					if err != nil || urn == "" {
						t.Fatalf("urn=%q err=%v", urn, err)
					}
					return
				}
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				if tc.wantErr == "outcome unknown" && !errors.Is(err, linkedin.ErrOutcomeUnknown) {
					t.Fatalf("err = %v is not ErrOutcomeUnknown", err)
				}
			})
		}
	}
}

// TestCreateRetriedWhenNeverSent: a connection that could not even be made
// proves LinkedIn never saw the request, so it is retried like a 429.
func TestCreateRetriedWhenNeverSent(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := srv.URL
	srv.Close() // nothing listens there any more
	s := &sleeps{}
	c := linkedin.New(linkedin.Config{BaseURL: addr, Sleep: s.sleep})
	_, err := c.CreatePost(context.Background(), seb, "hi")
	if err == nil || errors.Is(err, linkedin.ErrOutcomeUnknown) {
		t.Fatalf("err = %v", err)
	}
	if n := len(s.all()); n != 3 {
		t.Fatalf("waited %d times, want 3 (4 attempts)", n)
	}
}
