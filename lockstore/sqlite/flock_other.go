//go:build !unix

package sqlite

import (
	"fmt"
	"os"
	"runtime"
)

// identify fails: this platform has no flock, and without a file lock a
// second process could break the store's guarantee.
func identify(path string) (fileID, error) {
	return fileID{}, fmt.Errorf("sqlite: cannot lock %s: no file locking on %s", path, runtime.GOOS)
}

// lockFile, lockIdentity and unlockIdentity are never reached: identify
// fails first.
func lockFile(path string) (*os.File, error) {
	return nil, fmt.Errorf("sqlite: cannot lock %s: no file locking on %s", path, runtime.GOOS)
}

func lockIdentity(dir string, _ fileID, _ string) (*os.File, string, error) {
	return nil, "", fmt.Errorf("sqlite: cannot lock in %s: no file locking on %s", dir, runtime.GOOS)
}

func unlockIdentity(f *os.File, _ string) error { return f.Close() }

func unlockFile(f *os.File) error { return f.Close() }
