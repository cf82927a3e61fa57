package supervisor

import (
	"slices"
	"testing"
)

func TestTurnUsageIsTheTurnsShareOfTheProcessTotals(t *testing.T) {
	t.Parallel()
	s := NewCLI(CLIConfig{ID: "s"})
	total := func(cost float64, in, out int64) *Message {
		return &Message{Type: "result", TotalCostUSD: &cost, NumTurns: 2, DurationMS: 10,
			ModelUsage: map[string]ModelUsage{"m": {InputTokens: in, OutputTokens: out, CostUSD: cost}}}
	}
	s.mu.Lock()
	first := s.turnUsageLocked(total(0.5, 1000, 10))
	second := s.turnUsageLocked(total(0.75, 1500, 30))
	s.mu.Unlock()
	if first.CostUSD != 0.5 || first.InputTokens != 1000 || first.OutputTokens != 10 || first.NumTurns != 2 {
		t.Fatalf("first turn %+v", first)
	}
	if second.CostUSD != 0.25 || second.InputTokens != 500 || second.OutputTokens != 20 || second.Models["m"].CostUSD != 0.25 {
		t.Fatalf("second turn %+v: not the difference of the totals", second)
	}
}

func TestLimitsChangedAsksForANewProcess(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name                 string
		capUSD, spent, asked float64
		turns, askedTurns    int
		want                 bool
	}{
		{"no limits", 0, 0.3, 0, 0, 0, false},
		{"the process's cap matches what is left", 1, 0.3, 0.7, 0, 0, false},
		{"another session spent meanwhile", 1, 0.3, 0.4, 0, 0, true},
		{"a limit appeared", 0, 0, 1, 0, 0, true},
		{"the limit went away", 1, 0, 0, 0, 0, true},
		{"turns changed", 0, 0, 0, 5, 3, true},
	}
	for _, tc := range cases {
		s := NewCLI(CLIConfig{ID: "s"})
		s.procCap, s.procCost, s.procTurns = tc.capUSD, tc.spent, tc.turns
		s.settings = Settings{BudgetUSD: tc.asked, MaxTurns: tc.askedTurns}
		if got := s.limitsChangedLocked(); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestSpecArgsForControls(t *testing.T) {
	t.Parallel()
	spec := Spec{Model: "sonnet", PermissionMode: "plan", MaxThinkingTokens: 2048, Effort: "high", MaxTurns: 4, MaxBudgetUSD: 0.5,
		ForkSession: true, ResumeAt: "entry-1"}
	args := spec.Args("conv")
	for _, want := range []string{"--model=sonnet", "--permission-mode=plan", "--max-thinking-tokens=2048", "--effort=high", "--max-turns=4",
		"--max-budget-usd=0.5", "--resume=conv", "--fork-session", "--resume-session-at=entry-1"} {
		if !slices.Contains(args, want) {
			t.Errorf("%s missing from %v", want, args)
		}
	}
	if args := spec.Args(""); slices.Contains(args, "--fork-session") || slices.Contains(args, "--resume-session-at=entry-1") {
		t.Errorf("fork or resume-at without a resume: %v", args)
	}
}
