//go:build !unix

package main

import (
	"os"
	"syscall"
)

// pgProcAttr: off unix, initdb and postgres run as the current user.
func pgProcAttr() (attr func() *syscall.SysProcAttr, uid, gid int, err error) {
	return func() *syscall.SysProcAttr { return nil }, -1, -1, nil
}

// pgKillGroup kills the postmaster pid.
func pgKillGroup(pid int) {
	if p, err := os.FindProcess(pid); err == nil {
		_ = p.Kill()
	}
}
