package usage_test

import (
	"testing"
	"time"

	"github.com/rs/zerolog"

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
