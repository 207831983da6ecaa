package sqlite_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/lockstoretest"
	"github.com/claimbus/claimbus/lockstore/sqlite"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	lockstoretest.Run(t, func(t *testing.T) lockstore.Store {
		db, _ := newDB(t)
		return newStore(t, db, sqlite.Config{})
	})
}

func TestLeases(t *testing.T) {
	t.Parallel()
	lockstoretest.RunLeases(t, func(t *testing.T, ttl time.Duration) lockstoretest.LeaseStore {
		db, _ := newDB(t)
		clock := lockstoretest.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
		return lockstoretest.LeaseStore{
			Store:   newStore(t, db, sqlite.Config{Locks: lockstore.MemoryConfig{TTL: ttl, Clock: clock}}),
			Advance: clock.Advance,
		}
	})
}

// The store's locks are the memory engine's: Release of a lock ended by
// Reset or Close reports lockstore.ErrLockLost (and ErrClosed after Close).
func TestReleaseOfLostLock(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	db, _ := newDB(t)
	s := newStore(t, db, sqlite.Config{})
	reset, err := s.TryLock(ctx, key("reset"))
	require.NoError(t, err)
	require.NoError(t, s.Reset(ctx))
	err = reset.Release(ctx)
	require.ErrorIs(t, err, lockstore.ErrLockLost, "Release of a lock ended by Reset")
	require.ErrorContains(t, err, "counter/reset")

	closed, err := s.TryLock(ctx, key("closed"))
	require.NoError(t, err)
	require.NoError(t, s.Close())
	err = closed.Release(ctx)
	require.ErrorIs(t, err, lockstore.ErrLockLost, "Release of a lock ended by Close")
	require.ErrorIs(t, err, lockstore.ErrClosed)
}

// New validates its config: a bad one fails with every problem at once.
func TestNewValidatesItsConfig(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	_, err := sqlite.New(ctxT(t), db, sqlite.Config{Locks: lockstore.MemoryConfig{TTL: -1, Shards: 3}, LockDir: "./locks"})
	for _, w := range []string{"TTL", "Shards", "LockDir"} {
		require.ErrorContains(t, err, w)
	}
}

func TestNewRejectsUnsuitableDatabases(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	dir := t.TempDir()

	_, err := sqlite.New(ctx, nil, sqlite.Config{})
	require.ErrorContains(t, err, "nil *sql.DB")

	tests := []struct {
		name, dsn, want string
	}{
		{"in memory", ":memory:?_txlock=immediate&_busy_timeout=1000", "in memory"},
		{"deferred transactions", filepath.Join(dir, "deferred.db") + "?_busy_timeout=1000", "_txlock=immediate"},
		{"no busy timeout", filepath.Join(dir, "nobusy.db") + "?_txlock=immediate", "_busy_timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := openDB(t, tt.dsn)
			s, err := sqlite.New(ctx, db, sqlite.Config{})
			require.ErrorIs(t, err, sqlite.ErrUnsuitableDB)
			require.ErrorContains(t, err, tt.want)
			require.Nil(t, s)
		})
	}

	// A rejected database keeps no lock file locked: a suitable handle on
	// the same file gets a store.
	path := filepath.Join(dir, "deferred.db")
	db := openDB(t, testDSN(path, time.Second))
	newStore(t, db, sqlite.Config{})
}

func TestDSNEscapesThePath(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "a dir?x=1#frag%20", "db file.sqlite")
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	db := openDB(t, sqlite.DSN(path, 0))
	newStore(t, db, sqlite.Config{})
	require.FileExists(t, path)
	require.FileExists(t, path+sqlite.LockFileSuffix)
	var mode string
	require.NoError(t, db.QueryRow("PRAGMA journal_mode").Scan(&mode))
	require.Equal(t, "wal", mode)
	var busy int
	require.NoError(t, db.QueryRow("PRAGMA busy_timeout").Scan(&busy))
	require.Equal(t, 5000, busy, "the default busy timeout, 5s")
}

func TestFileLockInProcess(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	db, path := newDB(t)
	first := newStore(t, db, sqlite.Config{})

	// Another handle on the same file, as a second component of the same
	// program might open it: its store would have locks of its own.
	other := openDB(t, testDSN(path, time.Second))
	_, err := sqlite.New(ctx, other, sqlite.Config{})
	require.ErrorIs(t, err, sqlite.ErrFileLocked)
	require.ErrorContains(t, err, path+" is the file")
	require.ErrorContains(t, err, "a Store of this process")
	_, err = sqlite.New(ctx, db, sqlite.Config{})
	require.ErrorIs(t, err, sqlite.ErrFileLocked, "a second store on the same handle")

	require.NoError(t, first.Close())
	require.NoError(t, first.Close(), "Close is idempotent")
	newStore(t, other, sqlite.Config{})
}

// Close must not hand the file to another store while a call of this one
// still runs: its fn, told to stop, may still be writing.
func TestFileLockOutlivesRunningCalls(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	db, path := newDB(t)
	other := openDB(t, testDSN(path, time.Second))

	for _, op := range []string{"Exclusive", "Serialize"} {
		t.Run(op, func(t *testing.T) {
			s := newStore(t, db, sqlite.Config{})
			entered, release := make(chan struct{}), make(chan struct{})
			done := make(chan error, 1)
			go func() {
				work := func(ctx context.Context) error {
					close(entered)
					<-release
					return nil
				}
				var err error
				if op == "Exclusive" {
					_, err = sqlite.ExclusiveValue(ctx, s, key("f"), func(ctx context.Context, _ sqlite.Querier) (int, error) { return 0, work(ctx) })
				} else {
					_, err = sqlite.SerializeValue(ctx, s, key("f"), func(ctx context.Context, _ *sql.Tx) (int, error) { return 0, work(ctx) })
				}
				done <- err
			}()
			<-entered
			require.NoError(t, s.Close())
			_, err := sqlite.New(ctx, other, sqlite.Config{})
			require.ErrorIs(t, err, sqlite.ErrFileLocked, "the file lock was released while %s ran", op)
			close(release)
			require.ErrorIs(t, <-done, lockstore.ErrLockLost)
			// The last call out released it.
			s2, err := sqlite.New(ctx, other, sqlite.Config{})
			require.NoError(t, err)
			require.NoError(t, s2.Close())
		})
	}
}

const helperEnv = "CLAIMBUS_SQLITE_HELPER_DB"

// helperProcess opens a store on the database at path, says "ready" (or
// the error) on stdout and holds the store until stdin closes.
func helperProcess(path string) int {
	db, err := sql.Open("sqlite", testDSN(path, time.Second))
	if err != nil {
		fmt.Println("error", err)
		return 2
	}
	defer db.Close()
	s, err := sqlite.New(context.Background(), db, sqlite.Config{})
	switch {
	case errors.Is(err, sqlite.ErrFileLocked):
		fmt.Println("locked")
		return 0
	case err != nil:
		fmt.Println("error", err)
		return 2
	}
	defer s.Close()
	fmt.Println("ready")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	return 0
}

// startHelper runs helperProcess in a child process and returns its first
// line, its stdin (close it to end the child) and a wait function.
func startHelper(t *testing.T, path string) (string, func() error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+path)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	stop := func() error {
		stdin.Close()
		return cmd.Wait()
	}
	t.Cleanup(func() { _ = stop() })
	return strings.TrimSpace(line), stop
}

func TestFileLockAcrossProcesses(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	db, path := newDB(t)

	// Another process holds the file: this one refuses to start.
	line, stop := startHelper(t, path)
	require.Equal(t, "ready", line)
	_, err := sqlite.New(ctx, db, sqlite.Config{})
	require.ErrorIs(t, err, sqlite.ErrFileLocked)
	require.NoError(t, stop())

	// Its end released the lock: this process takes it, and a new one is
	// refused.
	s := newStore(t, db, sqlite.Config{})
	line, _ = startHelper(t, path)
	require.Equal(t, "locked", line)
	require.NoError(t, s.Close())
	line, _ = startHelper(t, path)
	require.Equal(t, "ready", line)
}
