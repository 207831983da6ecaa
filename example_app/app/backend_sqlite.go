package app

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"time"

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
	// turnWait bounds a write's wait for its turn at the database when
	// its ctx carries no deadline for it (see withWritesBy). Default
	// DefaultClaimTimeout; the node sets its claim wait.
	turnWait time.Duration
}

func (b sqliteBackend) Locker() lockstore.Locker { return b.store }
func (b sqliteBackend) Name() string             { return "sqlite" }

func (b sqliteBackend) Ping(ctx context.Context) error { return b.store.DB().PingContext(ctx) }

func (b sqliteBackend) claims(ctx context.Context) (claimstore.Store, error) {
	return cssqlite.New(ctx, b.store.DB(), cssqlite.Config{})
}

func (b sqliteBackend) db() querier { return sqliteDB{b} }

// tx runs fn in a transaction of sqlite.Begin without keys: it waits for
// its turn at the database's write gate, first come first served behind
// the other writers of this process, until the deadline ctx carries for
// its writes (withWritesBy) or, without one, for b.turnWait; past it,
// the error matches lockstore.ErrTimeout (isBusy). The DSN begins every
// transaction IMMEDIATE: the write lock is taken at BEGIN, so a
// read-modify-write never fails halfway with SQLITE_BUSY.
func (b sqliteBackend) tx(ctx context.Context, fn txFunc) (err error) {
	wait := cmp.Or(b.turnWait, DefaultClaimTimeout)
	if by, ok := writesBy(ctx); ok {
		// Once by has passed, the write goes ahead only if the gate is
		// free at once.
		wait = max(time.Until(by), time.Nanosecond)
	}
	t, tctx, err := sqlite.Begin(ctx, b.store, nil, wait)
	if err != nil {
		return err
	}
	defer func() {
		// After an error or a panic of fn; a no-op after the commit.
		err = errors.Join(err, t.Rollback())
	}()
	if err := fn(tctx, sqlQuerier{t.Tx()}); err != nil {
		return err
	}
	return t.Commit()
}

// sqliteDB runs statements outside any transaction of the caller: a read
// at once, a write in a transaction of its own (tx), which waits for its
// turn at the write gate rather than in SQLite's busy handler.
type sqliteDB struct{ b sqliteBackend }

func (d sqliteDB) exec(ctx context.Context, query string, args ...any) (n int64, err error) {
	err = d.b.tx(ctx, func(ctx context.Context, q querier) error {
		n, err = q.exec(ctx, query, args...)
		return err
	})
	return n, err
}

func (d sqliteDB) queryRow(ctx context.Context, query string, args ...any) row {
	return d.b.store.DB().QueryRowContext(ctx, query, args...)
}

func (sqliteBackend) isUniqueViolation(err error) bool {
	var e *moderncsqlite.Error
	return errors.As(err, &e) &&
		(e.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || e.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY)
}

// isUnavailable: the database is busy (a write's turn did not come in
// time, or another process held it past the busy timeout), locked, or
// cannot be read or written (I/O error, disk full, cannot open), or the
// handle or store was closed.
func (b sqliteBackend) isUnavailable(ctx context.Context, err error) bool {
	if b.isBusy(err) {
		return true
	}
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

// isBusy: a write whose turn at the write gate did not come in time
// (lockstore.ErrTimeout), or SQLITE_BUSY or SQLITE_LOCKED: another
// connection held the database past the busy timeout.
func (sqliteBackend) isBusy(err error) bool {
	var e *moderncsqlite.Error
	return errors.Is(err, lockstore.ErrTimeout) ||
		errors.As(err, &e) && (e.Code()&0xff == sqlite3.SQLITE_BUSY || e.Code()&0xff == sqlite3.SQLITE_LOCKED)
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
