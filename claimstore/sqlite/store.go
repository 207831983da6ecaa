package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/claimbus/claimbus/claimstore"
	"github.com/claimbus/claimbus/internal/sqlitegate"
)

// Store is the claimstore.Store on SQLite: see New. Its Tx methods run its
// statements in a transaction of the caller (see txcommand).
type Store struct {
	db  *sql.DB
	now func() time.Time
	// gate is db's write gate, shared with lockstore/sqlite: SQLite has
	// one writer, so the store's writes wait for their turn here in Go
	// (until their ctx ends) rather than polling in SQLite's busy
	// handler. Writers of other handles and processes are waited for by
	// the busy timeout.
	gate *sqlitegate.Gate
}

var _ claimstore.Store = (*Store)(nil)

// New returns a Store on two tables of db, a modernc.org/sqlite
// handle (see lockstore/sqlite.DSN for a connection string that suits).
// The store is safe for concurrent use; it starts no goroutine and needs
// no Close, and it does not own db. It fails with
// an error matching ErrUnsuitableDB when db is another driver's or its
// connections have no busy timeout. It brings the tables
// claimbus_reservation and claimbus_outcome up to date (see Migrations), or
// with Config.NoAutoMigrate only checks their version; ctx bounds that.
func New(ctx context.Context, db *sql.DB, cfg Config) (*Store, error) {
	if db == nil {
		return nil, errors.New("sqlite: New: nil *sql.DB")
	}
	if _, ok := db.Driver().(*sqlite.Driver); !ok {
		return nil, fmt.Errorf("%w: the driver is %T, not modernc.org/sqlite's", ErrUnsuitableDB, db.Driver())
	}
	var busyTimeout int64
	if err := db.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&busyTimeout); err != nil {
		return nil, fail("New: read busy_timeout", err)
	}
	if busyTimeout <= 0 {
		return nil, fmt.Errorf("%w: no busy timeout, so a write would fail at once while another connection writes: "+
			"add _busy_timeout=<ms> to the DSN (see lockstore/sqlite.DSN)", ErrUnsuitableDB)
	}
	if err := migrations.EnsureSQLite(ctx, db, cfg.NoAutoMigrate); err != nil {
		return nil, fmt.Errorf("sqlite: New: %w", err)
	}
	cfg = cfg.withDefaults()
	return &Store{db: db, now: cfg.Now, gate: sqlitegate.For(db)}, nil
}

// write runs f, a write statement, in a turn at db's write gate.
func (s *Store) write(ctx context.Context, f func() error) error {
	turn, err := s.gate.Enter(ctx)
	if err != nil {
		return err
	}
	defer turn.Leave()
	return f()
}

// nowNanos reads the store's clock.
func (s *Store) nowNanos() int64 { return s.now().UnixNano() }

// after returns t + d in nanoseconds, saturated at the end of time.
func after(t int64, d time.Duration) int64 {
	if int64(d) > math.MaxInt64-t {
		return math.MaxInt64
	}
	return t + int64(d)
}

// fail wraps err, from a statement of op: it matches
// claimstore.ErrUnavailable when the database stayed locked past the busy
// timeout (SQLITE_BUSY) or could not be opened.
func fail(op string, err error) error {
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_IOERR:
			return fmt.Errorf("sqlite: %s: %w: %w", op, claimstore.ErrUnavailable, err)
		}
	}
	return fmt.Errorf("sqlite: %s: %w", op, err)
}
