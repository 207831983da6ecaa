// Package sqlite is the embedded, single-node lock store of claimbus, on a
// SQLite database file through modernc.org/sqlite (pure Go, no cgo; the
// package registers its driver as "sqlite").
//
// # The store
//
// A Store hands out in-process locks (the engine of lockstore.Memory):
// SQLite runs in one process, so the locks need no database round trip.
// Two stores with locks of their own on one database would let two owners
// into one key, so New makes sure its Store is the only one on the file,
// under whatever name the file is opened (see "One store per file" below).
// New also checks that the *sql.DB begins its transactions IMMEDIATE and
// has a busy timeout; DSN builds a connection string that does:
//
//	db, err := sql.Open("sqlite", sqlite.DSN("app.db", 5*time.Second))
//	if err != nil {
//		return err
//	}
//	store, err := sqlite.New(ctx, db, sqlite.Config{})
//	if err != nil {
//		return err
//	}
//	defer store.Close()
//
// # One store per file
//
// The guard belongs to the database file, not to the path it was opened
// by: a hard link, a symlink or a bind mount is another name of the same
// file, and a second Store on it, in this process or another, fails to
// start with ErrFileLocked. From New until Close and the end of the last
// Serialize or Exclusive call, a Store holds
//
//   - the file's entry in this process's table of held files, keyed by the
//     file's identity (its device and inode numbers, which every name of
//     the file shares);
//   - an exclusive flock on "<database file>.claimbus.lock" (the path
//     SQLite reports, symlinks resolved, with LockFileSuffix), which every
//     process that sees the database's directory finds, in any mount
//     namespace: two containers sharing a volume, say;
//   - an exclusive flock on "claimbus-sqlite-<device>-<inode>.lock" in
//     Config.LockDir (default /tmp), which every process on the machine
//     that uses the same directory finds, whatever name it opened the
//     file by. It is removed at Close.
//
// The guard never opens the database file itself, though an flock on it
// would be the one lock every name shares: closing any descriptor of a
// file drops every POSIX lock the process holds on it, and SQLite's locks
// are POSIX locks (on BSD and macOS an flock would even conflict with
// them). Processes that share neither the database's directory nor the
// lock directory (a database file bind-mounted alone into a container with
// a /tmp of its own) are not kept apart; SQLite itself cannot serve one file under two
// names either, since it names the journal and the WAL after the path.
//
// On systems without flock (not unix), New fails.
//
// # Serialize and Exclusive
//
// Serialize runs a function in a BEGIN IMMEDIATE transaction while holding
// a key's lock, as the PostgreSQL store's Serialize does; here a local
// mutex does the work of PostgreSQL's pg_advisory_xact_lock, because
// SQLite's single-writer rule covers neither a read-modify-write across
// statements started DEFERRED nor a critical section that never touches
// the database.
//
//	balance, err := sqlite.Serialize(ctx, store, lockstore.Key{Namespace: "account", ID: id},
//		func(ctx context.Context, tx *sql.Tx) (int64, error) {
//			var balance int64
//			if err := tx.QueryRowContext(ctx, "SELECT balance FROM account WHERE id = ?", id).Scan(&balance); err != nil {
//				return 0, err
//			}
//			balance += amount
//			if _, err := tx.ExecContext(ctx, "UPDATE account SET balance = ? WHERE id = ?", balance, id); err != nil {
//				return 0, err
//			}
//			lockstore.AfterCommit(ctx, func() { notify(id, balance) })
//			return balance, nil
//		})
//
// A *Store is a lockstore.TxLocker[*sql.Tx, Querier]: the contract of
// Serialize, Exclusive, WithTx and their nesting and effects is stated
// there, and lockstoretest.RunTx checks it. What is SQLite's own: a nested
// call (inside Serialize's transaction, or the caller's attached with
// WithTx) takes no lock at all, since the transaction holds SQLite's only
// write lock, and only draws a token for a new key; a lock is lost when
// the store ends it (Close, Reset, a lease that ran out), which rolls
// Serialize back and cancels Exclusive's fn; a writer outside the store
// is waited for up to the busy timeout (lockstore.ErrTimeout). Exclusive
// holds the lock without a transaction, for a job whose writes commit one
// by one, and gives fn the *sql.DB. The fencing tokens (lockstore.TokenFrom)
// rise across restarts of the store on the file: New keeps their
// high-water mark in the table claimbus_token.
//
// # Migrations
//
// claimbus_token is created by versioned migrations, goose files exported
// as Migrations (dialect sqlite3) and recorded in
// claimbus_lockstore_version (VersionTable); New applies the pending ones,
// or with Config.NoAutoMigrate fails with ErrSchemaOutdated until Migrate
// (or goose on Migrations) has run. The first migration adopts a file an
// earlier release wrote, mark and all.
package sqlite
