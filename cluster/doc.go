// Package cluster holds the test of several Major servers behind HAProxy
// (deploy/haproxy.cfg): persons spread over the servers by the ring,
// notes shared through the vault's remote, a server lost, persons moved
// with `major person export` and `import`. It has no code of its own.
package cluster
