package sqlite_test

import (
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/lockstore/sqlite"
)

// The guard belongs to the database file, not to the path it was opened
// by: every other name of the same file finds it taken.

func TestFileLockThroughHardLink(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	db, path := newNamedDB(t)
	first := newStore(t, db, sqlite.Config{})

	// Another name of the same inode, in another directory: SQLite cannot
	// tell it from the first.
	link := filepath.Join(t.TempDir(), "link.db")
	require.NoError(t, os.Link(path, link))
	other := openDB(t, namedDSN(link, time.Second))
	_, err := sqlite.New(ctx, other, sqlite.Config{})
	require.ErrorIs(t, err, sqlite.ErrFileLocked)
	require.ErrorContains(t, err, link)
	require.ErrorContains(t, err, "a Store of this process")
	require.ErrorContains(t, err, path, "the message names the path the holder opened")

	// Once the first store is closed, the file is free under either name.
	require.NoError(t, first.Close())
	second := newStore(t, other, sqlite.Config{})
	_, err = sqlite.New(ctx, db, sqlite.Config{})
	require.ErrorIs(t, err, sqlite.ErrFileLocked, "and the link's store holds it for the first name too")
	require.NoError(t, second.Close())
}

func TestFileLockThroughSymlink(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	db, path := newNamedDB(t)
	newStore(t, db, sqlite.Config{})

	dir := t.TempDir()
	tests := []struct{ name, link, target, open string }{
		{"to the file", filepath.Join(dir, "file.db"), path, filepath.Join(dir, "file.db")},
		{"to the directory", filepath.Join(dir, "dir"), filepath.Dir(path), filepath.Join(dir, "dir", filepath.Base(path))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.NoError(t, os.Symlink(tt.target, tt.link))
			other := openDB(t, namedDSN(tt.open, time.Second))
			_, err := sqlite.New(ctx, other, sqlite.Config{})
			require.ErrorIs(t, err, sqlite.ErrFileLocked)
		})
	}
}

func TestFileLockThroughHardLinkAcrossProcesses(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	db, path := newNamedDB(t)
	link := filepath.Join(t.TempDir(), "link.db")
	require.NoError(t, os.Link(path, link))

	// This process holds the file: a process opening it by the link is
	// refused.
	s := newStore(t, db, sqlite.Config{})
	line, _ := startHelper(t, link)
	require.Equal(t, "locked", line)
	require.NoError(t, s.Close())

	// And the other way round: a process holding the link keeps this one
	// out of the first name.
	line, stop := startHelper(t, link)
	require.Equal(t, "ready", line)
	_, err := sqlite.New(ctx, db, sqlite.Config{})
	require.ErrorIs(t, err, sqlite.ErrFileLocked)
	require.ErrorContains(t, err, "another process")
	require.NoError(t, stop())
	newStore(t, db, sqlite.Config{})
}

func TestLockDirMustExist(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	db, _ := newDB(t)
	missing := filepath.Join(t.TempDir(), "missing")
	_, err := sqlite.New(ctx, db, sqlite.Config{LockDir: missing})
	require.ErrorContains(t, err, missing)
	require.NotErrorIs(t, err, sqlite.ErrFileLocked)

	// The failed New let go of what it had taken: the file is free.
	newStore(t, db, sqlite.Config{LockDir: t.TempDir()})
}

// newNamedDB is newDB in rollback-journal mode, for the tests that open one
// file under two names: SQLite finds a WAL by the name it opened the file
// with, so a WAL written through one name is unreadable through another
// (disk I/O error) once the store writes (its token table, at New). A
// rollback journal is gone after each commit.
func newNamedDB(t testing.TB) (*sql.DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "claimbus.db")
	return openDB(t, namedDSN(path, 5*time.Second)), path
}

// namedDSN is testDSN in rollback-journal mode (see newNamedDB).
func namedDSN(path string, busyTimeout time.Duration) string {
	return strings.Replace(testDSN(path, busyTimeout), "_journal_mode=WAL", "_journal_mode=DELETE", 1)
}
