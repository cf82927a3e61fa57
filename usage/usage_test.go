package usage_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/personstate"
	"github.com/majorhq/major/supervisor"
	"github.com/majorhq/major/usage"
)

// The ledger sums turns per person and day, keeps them across a restart,
// and lists the last days newest first, empty days included.
func TestLedgerSumsPerPersonAndDayAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	day1 := time.Date(2026, 11, 21, 23, 30, 0, 0, time.UTC)
	day2 := day1.Add(2 * time.Hour) // the next day (UTC)
	l := usage.Open(dir, zerolog.Nop())
	l.Record("sebastian", day1, &supervisor.Usage{CostUSD: 0.5, NumTurns: 2, InputTokens: 10})
	l.Record("sebastian", day2, &supervisor.Usage{CostUSD: 0.25, NumTurns: 1, OutputTokens: 7})
	l.Record("sebastian", day2, &supervisor.Usage{CostUSD: 0.25, NumTurns: 3})
	l.Record("petra", day2, &supervisor.Usage{CostUSD: 9})
	l.Close()
	l.Close() // idempotent

	l = usage.Open(dir, zerolog.Nop())
	defer l.Close()
	if got := l.Spent("sebastian", day2); got != 0.5 {
		t.Fatalf("sebastian spent %v on day 2, want 0.5", got)
	}
	days := l.LastDays("sebastian", day2.Add(24*time.Hour), 3)
	if len(days) != 3 || days[0].Messages != 0 || days[1].Messages != 2 || days[1].AgentTurns != 4 || days[2].CostUSD != 0.5 {
		t.Fatalf("last days: %+v", days)
	}
	total := usage.Sum(days)
	if total.Messages != 3 || total.CostUSD != 1 || total.InputTokens != 10 || total.OutputTokens != 7 || total.Date != "2026-11-21/2026-11-23" {
		t.Fatalf("total: %+v", total)
	}
}

// Each person's usage is in their own folder; a person released (moved
// away) is written and forgotten, and loaded again from their file.
func TestLedgerKeepsEachPersonInTheirFolder(t *testing.T) {
	dir := t.TempDir()
	day := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	l := usage.Open(dir, zerolog.Nop())
	defer l.Close()
	l.Record("sebastian", day, &supervisor.Usage{CostUSD: 2})
	l.Record("petra", day, &supervisor.Usage{CostUSD: 3})
	if err := l.Release("petra"); err != nil {
		t.Fatal(err)
	}
	if got := l.Spent("petra", day); got != 0 {
		t.Fatalf("a released person still spent %v", got)
	}
	b, err := os.ReadFile(personstate.File(dir, "petra", personstate.UsageFile))
	if err != nil || !strings.Contains(string(b), `"cost_usd":3`) {
		t.Fatalf("petra's file: %s, %v", b, err)
	}
	l.Load("petra")
	if got := l.Spent("petra", day); got != 3 {
		t.Fatalf("loaded again, petra spent %v, want 3", got)
	}
	l.Close()
	if b, err := os.ReadFile(personstate.File(dir, "sebastian", personstate.UsageFile)); err != nil || !strings.Contains(string(b), `"cost_usd":2`) {
		t.Fatalf("sebastian's file: %s, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "usage.json")); err == nil {
		t.Fatal("a file for everyone was written")
	}
}
