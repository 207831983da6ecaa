package sqlite_test

import (
	"context"
	"database/sql"
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
	db, path := newNamedDB(t)

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
			other := openDB(t, namedDSN(open, 5*time.Second))
			s := newStore(t, db, sqlite.Config{})
			_, err := sqlite.New(ctx, other, sqlite.Config{})
			require.ErrorIs(t, err, sqlite.ErrFileLocked, "in this process")
			line, _ := startHelper(t, open)
			require.Equal(t, "locked", line, "in another process")
			require.NoError(t, s.Close())
		})
	}
}

// fOFDGetlk is Linux's F_OFD_GETLK (36 on every architecture), which the
// syscall package does not name.
const fOFDGetlk = 36

// sqliteLock reports the lock that would stop probe, an open file
// description of its own, from write-locking all of the file: open file
// description locks conflict with POSIX locks even within one process, so
// this sees the locks SQLite holds here.
func sqliteLock(t *testing.T, probe *os.File) syscall.Flock_t {
	t.Helper()
	lk := syscall.Flock_t{Type: syscall.F_WRLCK}
	require.NoError(t, syscall.FcntlFlock(probe.Fd(), fOFDGetlk, &lk))
	return lk
}

// The guard must never open the database file: closing any descriptor of
// a file drops every POSIX lock this process holds on it, SQLite's
// included, and another process could then checkpoint and delete a WAL
// this one still reads.
func TestGuardLeavesSQLiteLocksAlone(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	db, path := newDB(t)
	_, err := db.ExecContext(ctx, "CREATE TABLE t (x INTEGER)")
	require.NoError(t, err)

	// An idle connection in WAL mode holds a SHARED lock on the file.
	probe, err := os.Open(path)
	require.NoError(t, err)
	before := sqliteLock(t, probe)
	require.Equal(t, int16(syscall.F_RDLCK), before.Type, "SQLite holds no lock to watch")

	s, err := sqlite.New(ctx, db, sqlite.Config{})
	require.NoError(t, err)
	_, err = sqlite.SerializeValue(ctx, s, key("k"), func(ctx context.Context, tx *sql.Tx) (int, error) {
		_, err := tx.ExecContext(ctx, "INSERT INTO t VALUES (1)")
		return 0, err
	})
	require.NoError(t, err)
	require.NoError(t, s.Close())

	after := sqliteLock(t, probe)
	require.Equal(t, before, after, "SQLite's lock on the database file is gone")
	// Closing probe drops SQLite's locks in turn: the end of the test.
	require.NoError(t, probe.Close())
}
