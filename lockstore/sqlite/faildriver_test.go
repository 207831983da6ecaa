package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/sqlitegate"
	"github.com/claimbus/claimbus/lockstore"
)

// failDriver is a database/sql driver whose transactions begin and commit
// but fail to roll back: SQLite itself practically never fails a ROLLBACK,
// and the tests need one that does.
type failDriver struct{}

var errRollback = errors.New("rollback failed")

type failConn struct{}
type failTx struct{}

func (failDriver) Open(string) (driver.Conn, error)  { return failConn{}, nil }
func (failConn) Prepare(string) (driver.Stmt, error) { return nil, errors.New("no statements") }
func (failConn) Close() error                        { return nil }
func (failConn) Begin() (driver.Tx, error)           { return failTx{}, nil }
func (failTx) Commit() error                         { return nil }
func (failTx) Rollback() error                       { return errRollback }
func (failConn) QueryContext(context.Context, string, []driver.NamedValue) (driver.Rows, error) {
	return nil, io.EOF
}

func init() { sql.Register("claimbus-faildriver", failDriver{}) }

func failStore(t *testing.T) *Store {
	t.Helper()
	db, err := sql.Open("claimbus-faildriver", "")
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	mem, err := lockstore.NewMemory(lockstore.MemoryConfig{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, mem.Close()) })
	// Tokens reserved in memory only: the driver has no table to keep them.
	tokens := &tokenSource{db: db, next: 1, limit: 1 << 62, block: tokenBlock}
	return &Store{db: db, mem: mem, tokens: tokens, gate: sqlitegate.For(db)}
}

func TestRollbackErrorComesBackWrapped(t *testing.T) {
	t.Parallel()
	s := failStore(t)
	ctx := context.Background()
	k := lockstore.Key{Namespace: "n", ID: "i"}
	fnErr := errors.New("fn failed")
	_, err := runSerialize(ctx, s, k, func(context.Context, *sql.Tx) (int, error) { return 0, fnErr })
	require.ErrorIs(t, err, fnErr)
	require.ErrorIs(t, err, errRollback)
	require.ErrorContains(t, err, `sqlite: Serialize "n/i": rollback: rollback failed`)

	// Lock and gate were given back all the same.
	l, err := s.TryLock(ctx, k)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	v, err := runSerialize(ctx, s, k, func(context.Context, *sql.Tx) (int, error) { return 7, nil })
	require.NoError(t, err)
	require.Equal(t, 7, v)
}

func TestNewRejectsOtherDrivers(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("claimbus-faildriver", "")
	require.NoError(t, err)
	defer db.Close()
	_, err = New(context.Background(), db, Config{})
	require.ErrorIs(t, err, ErrUnsuitableDB)
	require.ErrorContains(t, err, "sqlite.failDriver")
}
