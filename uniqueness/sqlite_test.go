package uniqueness_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/lockstore/sqlite"
)

// sqlTable is a staffTable on a SQLite database through database/sql,
// with a unique index on email as the backstop.
type sqlTable struct {
	db *sql.DB
}

const staffSchema = `CREATE TABLE staff (
	id    TEXT PRIMARY KEY,
	email TEXT NOT NULL,
	name  TEXT NOT NULL
);
CREATE UNIQUE INDEX staff_email ON staff (email);`

func (s *sqlTable) taken(ctx context.Context, email string) (bool, error) {
	var n int
	err := s.db.QueryRowContext(ctx, "SELECT count(*) FROM staff WHERE email = ?", email).Scan(&n)
	return n > 0, err
}

func (s *sqlTable) owner(ctx context.Context, email string) (string, error) {
	var id string
	err := s.db.QueryRowContext(ctx, "SELECT id FROM staff WHERE email = ?", email).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return id, err
}

func (s *sqlTable) insert(ctx context.Context, id, email, name string) error {
	_, err := s.db.ExecContext(ctx, "INSERT INTO staff (id, email, name) VALUES (?, ?, ?)", id, email, name)
	if err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed") {
		return errDuplicate
	}
	return err
}

func (s *sqlTable) count(ctx context.Context) (int, error) {
	var n int
	err := s.db.QueryRowContext(ctx, "SELECT count(*) FROM staff").Scan(&n)
	return n, err
}

// The sign-up storm with the SQLite store as the locker and a SQLite table,
// in the same database, as the lookup.
func TestStormOnSQLite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := sql.Open("sqlite", sqlite.DSN(filepath.Join(t.TempDir(), "staff.db"), 10*time.Second)+"&_synchronous=NORMAL")
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	_, err = db.ExecContext(ctx, staffSchema)
	require.NoError(t, err)
	store, err := sqlite.New(ctx, db, sqlite.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, store.Close()) })

	stormOnStore(t, store, &sqlTable{db: db})
}
