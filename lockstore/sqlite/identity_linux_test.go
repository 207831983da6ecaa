package sqlite_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/lockstore/sqlite"
)

// bindMount mounts src on dst (MS_BIND), unmounted when t ends, or skips t
// where this process may not mount.
func bindMount(t *testing.T, src, dst string) {
	t.Helper()
	if err := syscall.Mount(src, dst, "", syscall.MS_BIND, ""); err != nil {
		t.Skipf("cannot bind mount here (%v): run the tests as root to cover bind mounts", err)
	}
	t.Cleanup(func() { require.NoError(t, syscall.Unmount(dst, syscall.MNT_DETACH)) })
}

func TestFileLockThroughBindMount(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	db, path := newDB(t)

	// The database file mounted on a file of another directory, and its
	// directory mounted on another directory: two more names of one inode.
	fileMount := filepath.Join(t.TempDir(), "mounted.db")
	require.NoError(t, os.WriteFile(fileMount, nil, 0o644))
	bindMount(t, path, fileMount)
	dirMount := t.TempDir()
	bindMount(t, filepath.Dir(path), dirMount)

	for name, open := range map[string]string{
		"file":      fileMount,
		"directory": filepath.Join(dirMount, filepath.Base(path)),
	} {
		t.Run(name, func(t *testing.T) {
			s := newStore(t, db, sqlite.Config{})
			other := openDB(t, testDSN(open, time.Second))
			_, err := sqlite.New(ctx, other, sqlite.Config{})
			require.ErrorIs(t, err, sqlite.ErrFileLocked, "in this process")
			line, _ := startHelper(t, open)
			require.Equal(t, "locked", line, "in another process")
			require.NoError(t, s.Close())
		})
	}
}
