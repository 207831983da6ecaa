//go:build unix

package sqlite_test

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/lockstore/sqlite"
)

func TestIdentityLockFile(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	db, path := newNamedDB(t)
	lockDir := t.TempDir()
	s := newStore(t, db, sqlite.Config{LockDir: lockDir})

	// The lock file in LockDir is named by the file's identity, and exists
	// while the store runs.
	fi, err := os.Stat(path)
	require.NoError(t, err)
	st := fi.Sys().(*syscall.Stat_t)
	name := fmt.Sprintf("claimbus-sqlite-%d-%d.lock", uint64(st.Dev), uint64(st.Ino)) //nolint:unconvert // their types vary by system
	entries, err := os.ReadDir(lockDir)
	require.NoError(t, err)
	require.Len(t, entries, 1)
	require.Equal(t, name, entries[0].Name())

	// A store of this process with another LockDir is kept out all the
	// same, through a link too.
	link := filepath.Join(t.TempDir(), "link.db")
	require.NoError(t, os.Link(path, link))
	_, err = sqlite.New(ctx, openDB(t, namedDSN(link, time.Second)), sqlite.Config{LockDir: t.TempDir()})
	require.ErrorIs(t, err, sqlite.ErrFileLocked)

	// Close removes it.
	require.NoError(t, s.Close())
	entries, err = os.ReadDir(lockDir)
	require.NoError(t, err)
	require.Empty(t, entries)
}
