package hooks_test

import (
	"testing"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/majorhq/major/hooks"
	"github.com/majorhq/major/vault"
	"github.com/majorhq/major/vault/vaulttest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}

// The repositories the tests run on (package vaulttest).
var (
	git        = vaulttest.Git
	newRepo    = vaulttest.NewRepo
	writeFile  = vaulttest.WriteFile
	readFile   = vaulttest.ReadFile
	withRemote = vaulttest.WithRemote
	otherClone = vaulttest.OtherClone
)

func newGitSync(tb testing.TB, cfg vault.GitConfig) *vault.GitSync {
	tb.Helper()
	cfg.Logger = zerolog.New(zerolog.NewTestWriter(tb)).Level(zerolog.WarnLevel)
	g := vault.NewGitSync(cfg)
	tb.Cleanup(func() { _ = g.Close() })
	return g
}

// fakeCaller is a session for Handle: it records notices.
type fakeCaller struct {
	id, person string
	notices    chan string
}

func newCaller(id, person string) *fakeCaller {
	return &fakeCaller{id: id, person: person, notices: make(chan string, 16)}
}

func (c *fakeCaller) ID() string      { return c.id }
func (c *fakeCaller) Person() string  { return c.person }
func (c *fakeCaller) Notice(t string) { c.notices <- t }

var _ hooks.Caller = (*fakeCaller)(nil)
