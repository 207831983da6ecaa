package e2e

import (
	"os/exec"
	"syscall"
)

// dieWithTest makes a started process get SIGKILL when the test binary
// dies, so that a crashed test run leaves no node behind.
func dieWithTest(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
