//go:build !linux

package e2e

import "os/exec"

// dieWithTest does nothing where Pdeathsig does not exist: the tests
// kill their processes in their cleanup.
func dieWithTest(*exec.Cmd) {}
