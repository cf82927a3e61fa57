// Package notify reaches a person who is not looking: it knows who is
// watching which chat (Watch, SetVisible: an attached events stream or
// chat-stream whose page is visible), decides what to send and when (a
// question, permission or draft that waited NotifyAfter with nobody
// watching, a turn's end nobody saw, a refused message; never twice, never
// while the person watches, the kinds that need no answer held through the
// person's quiet hours), to which of the person's devices (Web Push with
// VAPID, ntfy, FCM HTTP v1), and the signed single-use action tokens that
// answer a request from the notification itself (Redeem).
//
// The session core (package relay) feeds it through relay.Notifier, which
// Service implements; httpapi serves its devices, settings and actions.
// It must not answer a request itself or touch a session: a redeemed
// token says what the person decided, and the caller applies it through
// the session core, so every rule of answering (first answer wins, a
// draft approves exactly its words once) holds as for a card. Its relay
// callbacks never block and never call back into the relay. It POSTs only
// to the device URLs a person registered that pass the URL rule (https,
// or a host named in AllowHosts; no private address unless named), never
// follows a redirect to another host, and bounds the time and size of
// each send. Secrets (push keys, ntfy and FCM tokens, the VAPID private
// key) stay in its state files (mode 0600) and are never shown back.
package notify
