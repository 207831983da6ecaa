//go:build unix

package main

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"syscall"
)

// pgProcAttr returns the process attributes of initdb and postgres (their
// own process group; the postgres user when example_app runs as root,
// which both refuse) and that user's ids, -1 when it is the current user.
func pgProcAttr() (attr func() *syscall.SysProcAttr, uid, gid int, err error) {
	var cred *syscall.Credential
	uid, gid = -1, -1
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, 0, 0, fmt.Errorf("running as root, the server must run as the postgres user: %w", err)
		}
		id, err1 := strconv.ParseUint(u.Uid, 10, 32)
		g, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err := errors.Join(err1, err2); err != nil {
			return nil, 0, 0, fmt.Errorf("postgres user ids %q/%q: %w", u.Uid, u.Gid, err)
		}
		cred = &syscall.Credential{Uid: uint32(id), Gid: uint32(g)}
		uid, gid = int(id), int(g)
	}
	return func() *syscall.SysProcAttr { return &syscall.SysProcAttr{Credential: cred, Setpgid: true} }, uid, gid, nil
}

// pgKillGroup kills the process group of the postmaster pid: it and its
// backends.
func pgKillGroup(pid int) { _ = syscall.Kill(-pid, syscall.SIGKILL) }
