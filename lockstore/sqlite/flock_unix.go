//go:build unix

package sqlite

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockFile opens (creating it if need be) and locks the file at path with
// an exclusive flock, without waiting. The lock belongs to the returned
// open file and ends when it is closed, or when the process dies.
func lockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open lock file: %w", err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is locked: one Store per database file, across processes", ErrFileLocked, path)
		}
		return nil, fmt.Errorf("sqlite: flock %s: %w", path, err)
	}
	return f, nil
}
