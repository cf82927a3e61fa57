// Package supervisor runs the Claude Code CLI: one long-lived process per
// chat session in stream-json mode, with its control protocol (initialize,
// permission and hook callbacks, SDK MCP messages, interrupt), resume after
// a stop or a crash, stall detection, and a Pool that bounds how many
// processes run at once (per person too), stops idle ones and keeps
// processes started ahead for persons' next new sessions (the warm pool).
//
// It knows nothing of HTTP, clients, vaults or persons' policies: what a
// session's CLI may do comes from its Spec, the answers to the CLI's
// requests come from its Handlers, and its events go to a Sink. It must not
// decide a permission, write to a vault or keep events itself.
//
// Locks are taken in one order, never the other way: CLI.turnMu → (the
// Sink, whose own locks may call back into the CLI) → CLI.mu;
// CLI.turnMu → Pool.mu (a turn's end wakes the turns waiting for a
// slot); Pool.mu → CLI.mu; Process.writeMu → CLI.mu (a message's write
// checks its turn). A method that needs CLI.mu held says so in its name:
// …Locked.
package supervisor
