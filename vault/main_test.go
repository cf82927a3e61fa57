package vault_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/majorhq/major/internal/leakcheck"
	"github.com/majorhq/major/vault/vaulttest"
)

func TestMain(m *testing.M) {
	leakcheck.Main(m, goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
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
	newGitSync = vaulttest.NewGitSync
	// silentRemote is a remote that accepts connections and never answers.
	silentRemote = vaulttest.SilentRemote
)
