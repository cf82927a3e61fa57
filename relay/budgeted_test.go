package relay

import (
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/sessionstore"
	"github.com/majorhq/major/supervisor"
)

// Budgeted says a budget applies where AdmitRequest checks one: a
// session's own budget for a session, the person's day for any process.
func TestBudgeted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name           string
		limits         Limits
		session, ahead bool // for a session, for a process no session has taken
	}{
		{"none", Limits{MaxTurns: 3}, false, false},
		{"session", Limits{SessionUSD: 1}, true, false},
		{"day", Limits{PersonDayUSD: 1}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st, err := sessionstore.New(t.TempDir(), zerolog.Nop())
			if err != nil {
				t.Fatal(err)
			}
			launch := LauncherFunc(func(p SessionParams) CLI {
				return supervisor.NewCLI(supervisor.CLIConfig{ID: p.ID, Person: p.Person, Sink: p.Sink})
			})
			s, err := NewRegistry(RegistryConfig{Launcher: launch, Store: st, TTL: time.Hour, Logger: zerolog.Nop(),
				Limits: func(person string) Limits {
					if person == "sebastian" {
						return tc.limits
					}
					return Limits{}
				}})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if got := s.Budgeted("sebastian", "chat-1"); got != tc.session {
				t.Errorf("for a session: %v, want %v", got, tc.session)
			}
			if got := s.Budgeted("sebastian", ""); got != tc.ahead {
				t.Errorf("for a process no session has taken: %v, want %v", got, tc.ahead)
			}
			if s.Budgeted("petra", "chat-2") {
				t.Error("a person without limits is budgeted")
			}
		})
	}
}
