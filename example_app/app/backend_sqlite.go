package app

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	moderncsqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/claimbus/claimbus/claimstore"
	cssqlite "github.com/claimbus/claimbus/claimstore/sqlite"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/sqlite"
)

// SQLiteBackend returns the backend of an embedded node on store's database
// file (see sqlite.New and sqlite.DSN). The store's in-process locks take
// the claims and locks: an SQLite database has one node.
func SQLiteBackend(store *sqlite.Store) Backend {
	return sqliteBackend{store: store, txLocking: txLocking[*sql.Tx, sqlite.Querier]{
		locker: store,
		wrap:   func(tx *sql.Tx) querier { return sqlQuerier{tx} },
	}}
}

type sqliteBackend struct {
	store *sqlite.Store
	txLocking[*sql.Tx, sqlite.Querier]
}

func (b sqliteBackend) Locker() lockstore.Locker { return b.store }
func (b sqliteBackend) Name() string             { return "sqlite" }

func (b sqliteBackend) Ping(ctx context.Context) error { return b.store.DB().PingContext(ctx) }

func (b sqliteBackend) claims(ctx context.Context) (claimstore.Store, error) {
	return cssqlite.New(ctx, b.store.DB(), cssqlite.Config{})
}

func (b sqliteBackend) db() querier { return sqlQuerier{b.store.DB()} }

func (b sqliteBackend) tx(ctx context.Context, fn txFunc) (err error) {
	// The DSN begins every transaction IMMEDIATE: the write lock is taken
	// at BEGIN, so a read-modify-write never fails halfway with SQLITE_BUSY.
	tx, err := b.store.DB().BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() {
		// After an error or a panic of fn; a no-op after the commit.
		err = errors.Join(err, ignoreDone(tx.Rollback()))
	}()
	if err := fn(ctx, sqlQuerier{tx}); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

func (sqliteBackend) isUniqueViolation(err error) bool {
	var e *moderncsqlite.Error
	return errors.As(err, &e) &&
		(e.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || e.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY)
}

// isUnavailable: the database is busy past the busy timeout, locked, or
// cannot be read or written (I/O error, disk full, cannot open), or the
// handle or store was closed.
func (sqliteBackend) isUnavailable(ctx context.Context, err error) bool {
	var e *moderncsqlite.Error
	if errors.As(err, &e) {
		switch e.Code() & 0xff { // the primary result code
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL, sqlite3.SQLITE_CANTOPEN:
			return true
		}
	}
	return errors.Is(err, sql.ErrConnDone) || errors.Is(err, lockstore.ErrUnavailable) || errors.Is(err, lockstore.ErrClosed) || errors.Is(err, claimstore.ErrUnavailable) ||
		(ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded))
}

// isBusy: SQLITE_BUSY or SQLITE_LOCKED, another writer held the database
// past the busy timeout.
func (sqliteBackend) isBusy(err error) bool {
	var e *moderncsqlite.Error
	return errors.As(err, &e) && (e.Code()&0xff == sqlite3.SQLITE_BUSY || e.Code()&0xff == sqlite3.SQLITE_LOCKED)
}

// isBadValue: a value too big for SQLite.
func (sqliteBackend) isBadValue(err error) bool {
	var e *moderncsqlite.Error
	return errors.As(err, &e) && e.Code()&0xff == sqlite3.SQLITE_TOOBIG
}

// sqlQuerier is a querier on database/sql: a *sql.DB or a *sql.Tx.
type sqlQuerier struct {
	q interface {
		ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
		QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	}
}

func (s sqlQuerier) exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := s.q.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (s sqlQuerier) queryRow(ctx context.Context, query string, args ...any) row {
	return s.q.QueryRowContext(ctx, query, args...)
}

// ignoreDone drops the error of a rollback after the transaction already
// ended.
func ignoreDone(err error) error {
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return err
}
