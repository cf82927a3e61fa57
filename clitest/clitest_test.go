package clitest_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/majorhq/major/clitest"
)

// The CLI every real-CLI test runs (MAJOR_CLAUDE, else the project's
// install) is the version scripts/install-claude.sh pins: a test run on
// another CLI would prove nothing about the one the server is meant to run.
func TestInstalledCLIIsThePinnedOne(t *testing.T) {
	t.Parallel()
	want := clitest.PinnedVersion(t)
	bin := clitest.Binary(t)
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatalf("%s --version: %v", bin, err)
	}
	got, _, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	if got != want {
		t.Fatalf("%s is claude %s; scripts/install-claude.sh pins %s: run `make claude` (or point MAJOR_CLAUDE at the pinned CLI)", bin, got, want)
	}
}
