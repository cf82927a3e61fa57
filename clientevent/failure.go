package clientevent

import (
	"errors"
	"fmt"
	"time"

	"github.com/majorhq/major/supervisor"
)

// The kinds of failure an error event names (its "kind" on the events
// stream; a refused event's too). The person reads a sentence for each; the detail (the CLI's
// result text, its stderr) goes to the log only: it holds internal paths
// and addresses.
const (
	KindOverloaded  = "overloaded"   // the API answered 529
	KindRateLimited = "rate_limited" // the API answered 429
	KindAuth        = "auth"         // no credential, or the API refused it (401, 403)
	KindNetwork     = "network"      // no HTTP answer: unreachable, connection dropped
	KindAPI         = "api_error"    // any other API error status
	KindCrashed     = "crashed"      // the CLI process died
	KindStalled     = "stalled"      // the CLI was silent too long and was killed
	KindClosed      = "closed"       // the session was closed during the turn
	KindRestarted   = "restarted"    // the server restarted during the turn
	KindFailed      = "failed"       // the turn failed for another reason
	KindBudget      = "budget"       // the session's or the person's budget is spent
	KindMaxTurns    = "max_turns"    // the message took the most agent turns one may
	KindConfig      = "config"       // the machine's configuration refuses the session's (managed settings)
	KindTurnEnded   = "turn_ended"   // a message given to the running turn did not go in before the turn ended
)

// failure is why a turn failed, as clients get it.
type failure struct {
	kind       string
	status     int // the API's HTTP status, 0 if none
	retryAfter int // seconds to wait before trying again, 0 if unknown
	message    string
}

func (f failure) event(sum Summary) Error {
	return Error{Type: "error", Message: f.message, Kind: f.kind, Status: f.status, RetryAfter: f.retryAfter, Summary: sum}
}

// apiKind classifies a failed API call from what the CLI reports: the HTTP
// status (0: no answer), the API's error type, the CLI's own error class.
func apiKind(status int, apiType, cliError string) string {
	switch {
	case status == 529 || apiType == "overloaded_error" || cliError == "overloaded":
		return KindOverloaded
	case status == 429 || apiType == "rate_limit_error" || cliError == "rate_limit":
		return KindRateLimited
	case status == 401 || status == 403 || apiType == "authentication_error" || apiType == "permission_error" ||
		cliError == "authentication_failed":
		return KindAuth
	case status == 0:
		return KindNetwork
	}
	return KindAPI
}

// retrySeconds rounds a retry delay up to whole seconds.
func retrySeconds(ms int64) int {
	return int((ms + 999) / 1000)
}

// retryStatus is the status line while the CLI waits to retry a failed API
// call (a system/api_retry message).
func retryStatus(m *supervisor.Message) Status {
	status := 0
	if m.ErrorStatus != nil {
		status = *m.ErrorStatus
	}
	kind := apiKind(status, "", m.Error)
	secs := retrySeconds(m.RetryDelayMS)
	var what string
	switch kind {
	case KindOverloaded:
		what = "The model is overloaded"
	case KindRateLimited:
		what = "The model's rate limit was reached"
	case KindAuth:
		what = "The model refused the API key"
	case KindNetwork:
		what = "The connection to the model failed"
	default:
		what = fmt.Sprintf("The model's API answered with an error (HTTP %d)", status)
	}
	msg := fmt.Sprintf("%s, retrying in %d s", what, secs)
	if m.Attempt > 0 && m.MaxRetries > 0 {
		msg += fmt.Sprintf(" (attempt %d of %d)", m.Attempt, m.MaxRetries)
	}
	return Status{Type: "status", Message: msg + " ...", Kind: kind, Status: status,
		RetryAfter: secs, Attempt: m.Attempt, MaxRetries: m.MaxRetries}
}

// resultFailure classifies a result with is_error set. apiMsg is the
// assistant message the CLI made up for a failed API call in this turn
// (nil if none), lastRetry its last retry notice (nil if none), at the
// time the turn ended.
func resultFailure(m, apiMsg, lastRetry *supervisor.Message, at time.Time) failure {
	status := 0
	if m.APIErrorStatus != nil {
		status = *m.APIErrorStatus
	}
	apiType, cliError := m.APIErrorType, ""
	if apiMsg != nil {
		cliError = apiMsg.Error
		if status == 0 && apiMsg.APIErrorStatus != nil {
			status = *apiMsg.APIErrorStatus
		}
		if apiType == "" {
			apiType = apiMsg.APIErrorType
		}
	}
	if m.TerminalReason != "api_error" && apiMsg == nil && status == 0 {
		return otherResultFailure(m)
	}
	return apiFailure(status, apiType, cliError, lastRetry, at)
}

// apiFailure is a failed API call: its HTTP status (0: no answer), the
// API's error type, the CLI's error class; lastRetry and at as for
// resultFailure.
func apiFailure(status int, apiType, cliError string, lastRetry *supervisor.Message, at time.Time) failure {
	f := failure{kind: apiKind(status, apiType, cliError), status: status}
	switch f.kind {
	case KindOverloaded:
		f.message = "The model is overloaded right now; please try again in a few minutes."
	case KindRateLimited:
		// The CLI honours the API's retry-after; its last wait is the
		// best estimate of the next one.
		if lastRetry != nil && lastRetry.RetryDelayMS > 0 {
			f.retryAfter = retrySeconds(lastRetry.RetryDelayMS)
			until := at.Add(time.Duration(f.retryAfter) * time.Second).UTC()
			f.message = fmt.Sprintf("The model is rate limited until about %s UTC (%d s); please try again then.",
				until.Format("15:04:05"), f.retryAfter)
		} else {
			f.message = "The model is rate limited; please wait a minute and try again."
		}
	case KindAuth:
		f.message = "The assistant cannot use the model: the API key is missing or invalid. Please tell whoever runs this server."
	case KindNetwork:
		f.message = "The model could not be reached (network unreachable or the connection dropped); please try again."
	default:
		f.message = fmt.Sprintf("The model's API answered with an error (HTTP %d); please try again.", status)
	}
	return f
}

// otherResultFailure is a failed turn that was not an API error.
func otherResultFailure(m *supervisor.Message) failure {
	f := failure{kind: KindFailed}
	switch m.Subtype {
	case "error_max_turns":
		f.kind = KindMaxTurns
		f.message = "The assistant stopped: this task needed too many steps. Ask for a smaller step."
	case "error_max_budget_usd":
		f.kind = KindBudget
		f.message = "The assistant stopped: the budget is spent."
	default:
		f.message = "The assistant could not finish this turn; please try again."
	}
	return f
}

// ErrServerStopped ends a turn the server stopped as it shut down (to
// restart, as a rule): the person reads that the server restarted, as
// after a crash (Restarted), not that they interrupted it.
var ErrServerStopped = errors.New("the server stopped during the turn")

// restartedMessage is what the person reads of a turn a restart ended.
const restartedMessage = "The server restarted during this turn; send your message again to continue."

// turnFailure classifies a turn that ended without a result.
func turnFailure(err error) failure {
	switch {
	case errors.Is(err, ErrServerStopped):
		return failure{kind: KindRestarted, message: restartedMessage}
	case errors.Is(err, supervisor.ErrStalled):
		return failure{kind: KindStalled, message: "The assistant stopped responding and was restarted. Please send your message again."}
	case errors.Is(err, supervisor.ErrClosed):
		return failure{kind: KindClosed, message: "The session was closed."}
	case errors.Is(err, supervisor.ErrStartRefused):
		return failure{kind: KindConfig, message: "This chat cannot start because the Claude Code policy on the server's machine forbids the MCP servers or skills configured for you; please tell whoever runs this server."}
	case errors.Is(err, supervisor.ErrProcessExited):
		return failure{kind: KindCrashed, message: "The assistant crashed; your next message continues the conversation."}
	}
	return failure{kind: KindFailed, message: "The assistant could not be started; please try again."}
}

// Restarted is the error event that closes a turn the server was running
// when it stopped.
func Restarted() Error {
	f := failure{kind: KindRestarted, message: restartedMessage}
	return f.event(Summary{Outcome: "error"})
}
