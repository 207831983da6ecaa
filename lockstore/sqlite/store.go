package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/claimbus/claimbus/internal/sqlitegate"
	"github.com/claimbus/claimbus/lockstore"
)

// Store is the SQLite lock store: in-process locks (the engine of
// lockstore.Memory) for a database file that only this process writes
// through a Store, and Serialize and Exclusive around it.
//
// It is the only Store on its database file, under any name: from New
// until Close and the end of the last Serialize or Exclusive call, a
// second Store on the same file (the same device and inode), in this
// process or another, opened by the same path, a hard link, a symlink or
// a bind mount, fails to start with ErrFileLocked instead of handing out
// the same keys twice (see docs/lockstore.md for the locks this
// takes, and their limits). The lock file next to the database file is
// left in place at Close: removing it would race with a process opening
// it.
type Store struct {
	db    *sql.DB
	mem   *lockstore.Memory
	guard *fileGuard

	// tokens hands out the fencing tokens of Serialize and Exclusive (see
	// token.go).
	tokens *tokenSource

	// gate is db's write gate (shared with claimstore/sqlite): SQLite has
	// one writer, so the transactions of Serialize and Begin wait for
	// their turn here, in Go, first come first served, rather than
	// polling in SQLite's busy handler.
	gate *sqlitegate.Gate

	// mu guards inflight, the Serialize and Exclusive calls running now,
	// and closed, set when Close begins: the last call to end after Close
	// releases the file lock.
	mu        sync.Mutex
	inflight  int
	closed    bool
	closeOnce sync.Once
	closeErr  error
}

var _ lockstore.Store = (*Store)(nil)

// New returns a Store on db, a modernc.org/sqlite handle on a database file
// (see DSN for a connection string that suits). It checks db at once and
// fails with an error matching ErrUnsuitableDB when the database is in
// memory (no file to lock), when its transactions do not begin IMMEDIATE
// (_txlock=immediate) or when it has no busy timeout (_busy_timeout); with
// ErrFileLocked when another Store holds the file, under any name. ctx
// bounds these checks. It brings the table claimbus_token (the fencing
// tokens' high-water mark, see Serialize) up to date (see Migrations), or
// with Config.NoAutoMigrate only checks its version, and reserves a block
// of tokens in it.
//
// The Store does not own db: Close leaves it open.
func New(ctx context.Context, db *sql.DB, cfg Config) (*Store, error) {
	if db == nil {
		return nil, errors.New("sqlite: New: nil *sql.DB")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	drv, ok := db.Driver().(*sqlite.Driver)
	if !ok {
		return nil, fmt.Errorf("%w: the driver is %T, not modernc.org/sqlite's", ErrUnsuitableDB, db.Driver())
	}
	var path string
	if err := db.QueryRowContext(ctx, "SELECT file FROM pragma_database_list WHERE name = 'main'").Scan(&path); err != nil {
		return nil, fmt.Errorf("sqlite: New: find the database file: %w", err)
	}
	if path == "" {
		return nil, fmt.Errorf("%w: the main database is in memory or temporary: the store needs a database file", ErrUnsuitableDB)
	}
	guard, err := guardFile(path, cmp.Or(cfg.LockDir, defaultLockDir))
	if err != nil {
		return nil, err
	}
	if err := checkTransactions(ctx, db, drv, path); err != nil {
		_ = guard.release() // the error that matters is err
		return nil, err
	}
	if err := migrations.EnsureSQLite(ctx, db, cfg.NoAutoMigrate); err != nil {
		_ = guard.release() // the error that matters is err
		return nil, fmt.Errorf("sqlite: New: %w", err)
	}
	tokens, err := newTokenSource(ctx, db)
	if err != nil {
		_ = guard.release() // the error that matters is err
		return nil, fmt.Errorf("sqlite: New: fencing tokens: %w", err)
	}
	mem, err := lockstore.NewMemory(cfg.Locks)
	if err != nil {
		_ = guard.release()
		return nil, fmt.Errorf("sqlite: New: %w", err)
	}
	return &Store{db: db, mem: mem, guard: guard, tokens: tokens, gate: sqlitegate.For(db)}, nil
}

// checkTransactions makes sure db's connections wait for locks (a busy
// timeout) and that its transactions take the write lock at BEGIN: while a
// transaction of db is open, a connection of our own without a busy
// timeout must find the database write-locked.
func checkTransactions(ctx context.Context, db *sql.DB, drv *sqlite.Driver, path string) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("sqlite: New: %w", err)
	}
	defer func() { _ = conn.Close() }()
	var busyTimeout int64
	if err := conn.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&busyTimeout); err != nil {
		return fmt.Errorf("sqlite: New: read busy_timeout: %w", err)
	}
	if busyTimeout <= 0 {
		return fmt.Errorf("%w: no busy timeout, so a write would fail at once while another connection writes: "+
			"add _busy_timeout=<ms> to the DSN (see sqlite.DSN)", ErrUnsuitableDB)
	}

	probe, err := drv.Open(fileURI(path))
	if err != nil {
		return fmt.Errorf("sqlite: New: open a probe connection: %w", err)
	}
	defer func() { _ = probe.Close() }()
	execer, ok := probe.(driver.ExecerContext)
	if !ok {
		return fmt.Errorf("%w: the driver's connections cannot execute statements directly", ErrUnsuitableDB)
	}
	exec := func(q string) error { _, err := execer.ExecContext(ctx, q, nil); return err }

	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: New: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	err = exec("BEGIN IMMEDIATE")
	switch {
	case err == nil:
		_ = exec("ROLLBACK")
		return fmt.Errorf("%w: transactions begin DEFERRED, so a read-modify-write can fail with SQLITE_BUSY when it writes: "+
			"add _txlock=immediate to the DSN (see sqlite.DSN)", ErrUnsuitableDB)
	case isBusy(err):
		return nil // the open transaction holds the write lock: it began IMMEDIATE
	default:
		return fmt.Errorf("sqlite: New: probe the write lock: %w", err)
	}
}

// isBusy reports whether err is SQLite's SQLITE_BUSY (any extended code).
func isBusy(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY
}

// DB returns the handle the store was made with.
func (s *Store) DB() *sql.DB { return s.db }

// TryLock takes key now, or fails with lockstore.ErrLocked while it is held.
func (s *Store) TryLock(ctx context.Context, key lockstore.Key) (lockstore.Lock, error) {
	return s.mem.TryLock(ctx, key)
}

// Lock waits, first come first served, until key is free or ctx ends.
func (s *Store) Lock(ctx context.Context, key lockstore.Key) (lockstore.Lock, error) {
	return s.mem.Lock(ctx, key)
}

// Held lists the locks held now, ordered by key.
func (s *Store) Held(ctx context.Context) ([]lockstore.Holder, error) {
	return s.mem.Held(ctx)
}

// Waiting returns the number of Lock calls (Serialize and Exclusive
// included) waiting for key now, not counting its holder.
func (s *Store) Waiting(key lockstore.Key) int { return s.mem.Waiting(key) }

// Close ends every lock (closing its Lost channel; its Release then
// reports lockstore.ErrLockLost), fails every waiter with
// lockstore.ErrClosed and releases the file lock: at once when no call of
// Serialize or Exclusive runs, else when the last one ends (their fns,
// told to stop, may still be writing; another store on the file must not
// start before). A Serialize whose lock it ends rolls back. It does not
// wait, and it leaves the *sql.DB open. Close is idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		busy := s.inflight > 0
		s.mu.Unlock()
		s.closeErr = s.mem.Close()
		if !busy {
			s.closeErr = errors.Join(s.closeErr, s.guard.release())
		}
	})
	return s.closeErr
}

// enter counts a call of Serialize or Exclusive in, or fails with
// lockstore.ErrClosed once Close has begun. A nil error must be matched by
// one call of exit.
func (s *Store) enter() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return lockstore.ErrClosed
	}
	s.inflight++
	return nil
}

// exit counts a call out; the last one out after Close releases the file
// lock.
func (s *Store) exit() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inflight--
	if s.inflight == 0 && s.closed {
		_ = s.guard.release() // the last call out: nobody to report to
	}
}
