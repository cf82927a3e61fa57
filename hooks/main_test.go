package hooks_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/majorhq/major/hooks"
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
	newRepo    = vaulttest.NewRepo
	writeFile  = vaulttest.WriteFile
	readFile   = vaulttest.ReadFile
	withRemote = vaulttest.WithRemote
	otherClone = vaulttest.OtherClone
	newGitSync = vaulttest.NewGitSync
)

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
