package supervisor

import (
	"errors"
	"fmt"
	"strings"
)

// ErrStartRefused is what a StartRefused is (errors.Is): the CLI refused
// to start the session at all, and trying again changes nothing.
var ErrStartRefused = errors.New("claude refused to start the session")

// StartRefused is why the CLI refused to start: the machine's managed
// settings (its policy for every claude) forbid something the launch
// asks for.
type StartRefused struct {
	// Reason is the CLI's name for it, e.g. "sideload_flags_disabled".
	Reason string
	// Setting is the managed setting that forbids it, e.g.
	// "disableSideloadFlags".
	Setting string
	// Detail is the CLI's own sentence, for the log.
	Detail string
}

func (e *StartRefused) Error() string {
	return fmt.Sprintf("%s: the machine's managed settings (%s) refuse it (%s): %s", ErrStartRefused, e.Setting, e.Reason, e.Detail)
}

// Is makes errors.Is(err, ErrStartRefused) true.
func (e *StartRefused) Is(target error) bool { return target == ErrStartRefused }

// refusals are the CLI's start refusals that a host can name: the
// managed setting the CLI writes, in parentheses, in its one line on
// stderr before it exits, and its reason for it.
var refusals = []struct{ setting, reason string }{
	// Managed settings set disableSideloadFlags, and the launch brings
	// plugins (skills), agents or MCP servers of its own: "--mcp-config
	// is disabled by your organization's managed settings
	// (disableSideloadFlags). ...". SDK-hosted servers are not refused.
	{"disableSideloadFlags", "sideload_flags_disabled"},
}

// startRefusal reads why a process that exited while starting refused to
// start, from its stderr; nil if it names no refusal.
func startRefusal(stderr string) *StartRefused {
	for _, r := range refusals {
		for _, line := range strings.Split(stderr, "\n") {
			if strings.Contains(line, "("+r.setting+")") {
				return &StartRefused{Reason: r.reason, Setting: r.setting, Detail: strings.TrimSpace(line)}
			}
		}
	}
	return nil
}
