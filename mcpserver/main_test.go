package mcpserver_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/majorhq/major/internal/leakcheck"
)

func TestMain(m *testing.M) {
	leakcheck.Main(m, goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}
