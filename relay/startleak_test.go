package relay_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/majorhq/major/internal/leakcheck"
	"github.com/majorhq/major/relay"
	"github.com/majorhq/major/relay/relaytest"
	"github.com/majorhq/major/sessionstore"
)

// A registry that cannot read its state directory's sessions fails to
// start, and leaves nothing running: the usage ledger it opened first
// (its writer goroutine) is closed again. Not parallel: it counts the
// goroutines that outlive it.
func TestFailedStartLeavesNothingRunning(t *testing.T) {
	before := goleak.IgnoreCurrent()
	dir := t.TempDir()
	st, err := sessionstore.New(dir, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	// The persons folder is a file: it cannot be listed.
	if err := os.WriteFile(filepath.Join(dir, "persons"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := relay.NewRegistry(relay.RegistryConfig{Launcher: &relaytest.Launcher{}, Store: st, Logger: zerolog.Nop()}); err == nil {
		t.Fatal("a registry started on an unreadable state directory")
	}
	leakcheck.None(t, before)
}
