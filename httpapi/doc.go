// Package httpapi is the HTTP API in front of the session core (package
// relay): routing, authentication (bearer token and person), CORS,
// request binding (JSON, form and multipart bodies), errors mapped to
// statuses in one place, and the NDJSON streams written and flushed line
// by line, with the compat endpoints the seed clients speak; the person's
// notes served read-only, with the headers that keep a file from running
// in the client's origin; and the notification endpoints (devices,
// settings, page visibility, actions) in front of package notify, whose
// actions it applies through the session core.
//
// It holds no session state: every session, message, queue entry and
// event comes from relay.Registry. It must not start CLIs, translate CLI
// events or touch the disk itself: the files a message carries are saved
// by package attachments, and the notes it serves are opened by package
// vault's guard.
package httpapi
