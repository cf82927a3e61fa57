// Package relay is the session core: the registry of chat sessions
// (Registry) and each session (Session) with its numbered event log, replay and
// fan-out to subscribers (Stream) of the client events package clientevent
// makes of the CLI's (and of its own: questions, drafts, the queue), the
// queue of waiting messages, questions, permissions and drafts, the session
// controls (settings, fork, rewind), the limits (against the usage
// package's ledger of what each person spent), what a session keeps on
// disk (its index entry, which events a compaction keeps, expiry; the
// files themselves are package sessionstore's), what a message carries
// besides its text on its way to the CLI (files, attached notes, an
// imported conversation; the blocks are package attachments'), what each
// turn changed in the person's notes (read from the turn-end commits
// through the Commits interface, never under Session.mu), and the
// metrics.
//
// A chat drives its CLI through the CLI interface, which
// supervisor.CLI satisfies; relaytest fakes it. relay knows nothing of
// HTTP: it must not import gin or net/http handlers, read requests or map
// errors to statuses. The API in front of it is package httpapi.
//
// What may need a person who is not looking (a request that waits, a
// turn's end, a refused message) is told to the registry's Notifier
// (package notify implements it; relay never imports it).
//
// Locks are taken in one order, never the other way: Registry.mu →
// Stream.upkeep → Session.mu → {the CLI's own, Stream.mu, drafts.mu →
// asks.mu, the Notifier's own}. Stream.Events and Stream.Subscribe may read an evicted
// session's events back from disk (under Stream.upkeep): never call them
// with Session.mu held. The CLI
// publishes its events (Session.Publish takes Session.mu) with its turn
// lock held, so nothing that holds Session.mu calls the CLI's Send or
// Interrupt. Session.mu guards the parts of a session that one arriving
// event changes together, each a type of its own: the queue (turnQueue,
// with the operation that holds the session: a rewind, a fork), the
// CLI's turn as its events arrive (cliTurn, the turn rule of turns.go),
// and the events held behind a turn's end hook (heldEvents); an idle
// session is evicted (its events and history leave memory) only when none
// of these is under way and no operation holds it. A helper
// that needs Session.mu held says so in its name: …Locked.
package relay
