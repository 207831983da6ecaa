//go:build !unix

package sqlite

import (
	"fmt"
	"os"
	"runtime"
)

// lockFile fails: this platform has no flock, and without a file lock a
// second process could break the store's guarantee.
func lockFile(path string) (*os.File, error) {
	return nil, fmt.Errorf("sqlite: cannot lock %s: no file locking on %s", path, runtime.GOOS)
}
