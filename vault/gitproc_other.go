//go:build !unix

package vault

import "os/exec"

// inOwnGroup leaves the default: without process groups only git itself is
// killed on cancel.
func inOwnGroup(cmd *exec.Cmd) {}
