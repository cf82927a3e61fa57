package vault_test

import (
	"testing"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

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
	writeFile  = vaulttest.WriteFile
	readFile   = vaulttest.ReadFile
	newRepo    = vaulttest.NewRepo
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
