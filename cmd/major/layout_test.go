package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/majorhq/major/clitest"
)

func TestDefaultStateDirIsOutsideTheVault(t *testing.T) {
	t.Parallel()
	env := map[string]string{"MAJOR_VAULT_ROOT": "/v", "MAJOR_AUTH_FILE": "/a", "HOME": "/home/x"}
	c, err := parseFlags(nil, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.StateDir != "/home/x/.local/state/major" {
		t.Fatalf("state dir %q", c.StateDir)
	}
	if c.ConfigDir != "/home/x/.config/major" {
		t.Fatalf("config dir %q", c.ConfigDir)
	}
	env["XDG_STATE_HOME"] = "/xdg"
	env["XDG_CONFIG_HOME"] = "/xdgc"
	if c, _ = parseFlags(nil, func(k string) string { return env[k] }, io.Discard); c.StateDir != "/xdg/major" || c.ConfigDir != "/xdgc/major" {
		t.Fatalf("state dir %q config dir %q", c.StateDir, c.ConfigDir)
	}
	env["MAJOR_CONFIG_DIR"] = "/etc/major"
	if c, _ = parseFlags(nil, func(k string) string { return env[k] }, io.Discard); c.ConfigDir != "/etc/major" {
		t.Fatalf("config dir %q", c.ConfigDir)
	}
}

// TestRefusesUnsafeLayout: a person named after the audit log folder, or a
// state directory a person's tools could reach, stops the server at start
// with an error naming the problem.
func TestRefusesUnsafeLayout(t *testing.T) {
	t.Parallel()
	bin := clitest.Binary(t)
	for _, tc := range []struct {
		name    string
		persons string
		li      string
		auto    string
		state   func(vault string) string
		// conf makes the configuration directory (default: an empty
		// folder of its own) given the vault and the state directory.
		conf func(vault, state string) string
		want string
	}{
		{name: "config in the vault repository", persons: `["sebastian"]`, conf: func(v, _ string) string { return filepath.Join(v, ".major") }, want: "overlaps the vault repository"},
		{name: "config linked into the vault", persons: `["sebastian"]`, conf: func(v, _ string) string {
			link := filepath.Join(t.TempDir(), "link")
			if err := os.Symlink(filepath.Join(v, "sebastian"), link); err != nil {
				t.Fatal(err)
			}
			return link
		}, want: "overlaps the vault repository"},
		{name: "config in the state dir", persons: `["sebastian"]`, conf: func(_, s string) string { return filepath.Join(s, "config") }, want: "overlap"},
		{name: "state in the config dir", persons: `["sebastian"]`, conf: func(_, s string) string { return filepath.Dir(s) }, want: "overlap"},
		{name: "broken config file", persons: `["sebastian"]`, conf: func(_, s string) string {
			c := filepath.Join(t.TempDir(), "persons", "sebastian")
			if err := os.MkdirAll(c, 0o755); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(c, "config.json"), `{"publishing": "sometimes"}`)
			return filepath.Dir(filepath.Dir(c))
		}, want: `persons/sebastian/config.json: publishing "sometimes"`},
		{name: "person claude", persons: `["sebastian", "claude"]`, want: `person "claude" cannot be served`},
		{name: "linkedin person claude", persons: `["sebastian"]`, li: `{"claude": {"access_token": "x", "author": "urn:li:person:x"}}`, want: "--linkedin-config"},
		{name: "auto-publish claude", persons: `["sebastian"]`, auto: "claude", want: "--linkedin-auto-publish"},
		{name: "state in a person's folder", persons: `["sebastian"]`, state: func(v string) string { return filepath.Join(v, "sebastian", ".state") }, want: "inside the vault folder sebastian/"},
		{name: "state in another person-like folder", persons: `["sebastian"]`, state: func(v string) string { return filepath.Join(v, "later", "x") }, want: "inside the vault folder later/"},
		{name: "state in the audit folder", persons: `["sebastian"]`, state: func(v string) string { return filepath.Join(v, "claude", "state") }, want: "inside the vault folder claude/"},
		{name: "state is the vault root", persons: `["sebastian"]`, state: func(v string) string { return v }, want: "is the vault root"},
		{name: "state through a symlink", persons: `["sebastian"]`, state: func(v string) string {
			link := filepath.Join(t.TempDir(), "link")
			if err := os.Symlink(filepath.Join(v, "sebastian"), link); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(link, "state")
		}, want: "inside the vault folder sebastian/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			vault := filepath.Join(dir, "vault")
			if err := os.MkdirAll(filepath.Join(vault, "sebastian"), 0o755); err != nil {
				t.Fatal(err)
			}
			auth := filepath.Join(dir, "auth.json")
			writeFile(t, auth, `{"tokens": {"t": `+tc.persons+`}}`)
			state := filepath.Join(dir, "state")
			if tc.state != nil {
				state = tc.state(vault)
			}
			conf := filepath.Join(dir, "config")
			if tc.conf != nil {
				conf = tc.conf(vault, state)
			}
			args := []string{"serve", "--addr", "127.0.0.1:0", "--vault-root", vault, "--state-dir", state,
				"--config-dir", conf, "--claude", bin, "--auth-file", auth}
			if tc.li != "" {
				li := filepath.Join(dir, "li.json")
				writeFile(t, li, tc.li)
				args = append(args, "--linkedin-config", li)
			}
			if tc.auto != "" {
				args = append(args, "--linkedin-auto-publish", tc.auto)
			}
			// A layout that is not refused would serve: stop it soon.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := run(ctx, args, nil, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("run: %v, want an error containing %q", err, tc.want)
			}
			if _, err := os.Stat(filepath.Join(state, "persons")); err == nil {
				t.Fatal("the refused state dir was created")
			}
		})
	}
}
