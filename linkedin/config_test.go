package linkedin_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/majorhq/major/linkedin"
)

func writeFile(tb testing.TB, content string) string {
	tb.Helper()
	p := filepath.Join(tb.TempDir(), "linkedin.json")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		tb.Fatal(err)
	}
	return p
}

func TestLoadConfig(t *testing.T) {
	t.Parallel()
	const secret = "SECRET-TOKEN-123"
	tests := []struct {
		name    string
		path    func(testing.TB) string
		want    linkedin.Accounts
		wantErr string
	}{
		{name: "no path means not configured", path: func(testing.TB) string { return "" }, want: linkedin.Accounts{}},
		{name: "missing file means not configured", path: func(tb testing.TB) string { return filepath.Join(tb.TempDir(), "absent.json") }, want: linkedin.Accounts{}},
		{
			name: "two persons",
			path: func(tb testing.TB) string {
				return writeFile(tb, `{"sebastian":{"access_token":"t1","author":"urn:li:person:abc"},
					"petra":{"access_token":"t2","author":"urn:li:organization:42"}}`)
			},
			want: linkedin.Accounts{
				"sebastian": {AccessToken: "t1", Author: "urn:li:person:abc"},
				"petra":     {AccessToken: "t2", Author: "urn:li:organization:42"},
			},
		},
		{name: "empty object", path: func(tb testing.TB) string { return writeFile(tb, `{}`) }, want: linkedin.Accounts{}},
		{name: "not JSON", path: func(tb testing.TB) string { return writeFile(tb, `{"sebastian":`) }, wantErr: "parse linkedin config"},
		{name: "missing token", path: func(tb testing.TB) string { return writeFile(tb, `{"sebastian":{"author":"urn:li:person:abc"}}`) }, wantErr: `person "sebastian": access_token is empty`},
		{
			name: "bad author",
			path: func(tb testing.TB) string {
				return writeFile(tb, `{"petra":{"access_token":"`+secret+`","author":"petra"}}`)
			},
			wantErr: `person "petra": author "petra" is not`,
		},
		{
			name: "person that is not a folder name",
			path: func(tb testing.TB) string {
				return writeFile(tb, `{"../x":{"access_token":"`+secret+`","author":"urn:li:person:a"}}`)
			},
			wantErr: `person "../x": not a valid person name`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := linkedin.LoadConfig(tt.path(t))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), secret) {
					t.Fatalf("error leaks the token: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) || len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for p, a := range tt.want {
				if got[p] != a {
					t.Fatalf("%s: got %+v", p, got[p])
				}
			}
		})
	}
}

func TestLoadConfigUnreadable(t *testing.T) {
	t.Parallel()
	// A directory where the file should be is a broken deployment, not "not
	// configured".
	if _, err := linkedin.LoadConfig(t.TempDir()); err == nil {
		t.Fatal("reading a directory as the config should fail")
	}
}

func TestAccountNeverPrintsToken(t *testing.T) {
	t.Parallel()
	a := linkedin.Account{AccessToken: "SECRET-TOKEN-123", Author: "urn:li:person:abc"}
	for _, s := range []string{fmt.Sprint(a), fmt.Sprintf("%v %+v %#v %s", a, a, a, a), fmt.Sprint(linkedin.Accounts{"x": a})} {
		if strings.Contains(s, "SECRET") {
			t.Fatalf("token printed: %s", s)
		}
		if !strings.Contains(s, "urn:li:person:abc") {
			t.Fatalf("author missing: %s", s)
		}
	}
}

func TestValidateURNs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		urn                   string
		post, comment, thread bool
	}{
		{urn: "urn:li:share:123", post: true, thread: true},
		{urn: "urn:li:ugcPost:7000123", post: true, thread: true},
		{urn: "urn:li:activity:6631349431612559360", post: true, thread: true},
		{urn: "urn:li:comment:(urn:li:activity:123,456)", comment: true, thread: true},
		{urn: "urn:li:comment:(urn:li:ugcPost:123,456)", comment: true, thread: true},
		{urn: ""},
		{urn: "123"},
		{urn: "urn:li:share:"},
		{urn: "urn:li:share:12a"},
		{urn: "urn:li:person:123"},
		{urn: "urn:li:share:123/../../me"},
		{urn: " urn:li:share:123"},
		{urn: "urn:li:comment:123"},
		{urn: "urn:li:comment:(urn:li:activity:123)"},
		{urn: "urn:li:comment:(urn:li:activity:123,456"},
		{urn: "urn:li:comment:(urn:li:person:123,456)"},
		{urn: "https://www.linkedin.com/feed/update/urn:li:activity:123/"},
	}
	for _, tt := range tests {
		t.Run(tt.urn, func(t *testing.T) {
			t.Parallel()
			if got := linkedin.ValidatePostURN(tt.urn) == nil; got != tt.post {
				t.Errorf("ValidatePostURN ok = %v, want %v", got, tt.post)
			}
			if got := linkedin.ValidateCommentURN(tt.urn) == nil; got != tt.comment {
				t.Errorf("ValidateCommentURN ok = %v, want %v", got, tt.comment)
			}
			if got := linkedin.ValidateThreadURN(tt.urn) == nil; got != tt.thread {
				t.Errorf("ValidateThreadURN ok = %v, want %v", got, tt.thread)
			}
		})
	}
}
