// Package clientevent is where a CLI event becomes a client event: the
// events the clients read (text, status, tool, tool_result, done, error,
// cli, turn_start, rate_limit, ...), their seed-004 compat form (Compat),
// and the Translator that turns one session's supervisor events into
// them, naming each failure in a sentence the person can act on.
//
// It only translates: it must not publish, store or send anything, hold a
// lock or know of HTTP. The session core (package relay) numbers and
// publishes what it returns, and adds the events of its own (questions,
// drafts, the queue).
package clientevent
