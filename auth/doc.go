// Package auth is who may use the server: the token file (each token
// stored as its SHA-256 digest, with a name, the persons it acts as, when
// it was made and last used), read again when it changes so a revoked
// token is refused from the next request on; the pairing codes that give
// a person's new device a token of its own; and the limit on failed
// attempts per client address.
//
// The file is changed only through Edit, under a lock, by the server
// (pairing, revoking from the web client, recording use) and by
// `major token`; a file written by hand in the older plain format
// ({"tokens": {"<token>": ["person"]}}) is read as it is and rewritten
// hashed by the first change.
package auth
