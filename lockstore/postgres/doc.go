// Package postgres is the PostgreSQL backend of lockstore: a Store whose
// locks are session advisory locks, so that every node sharing one
// database behaves as one, plus Serialize and Exclusive for critical
// sections that run in (or beside) a transaction.
//
// # The Locker
//
//	pool, err := pgxpool.New(ctx, "postgres://app@db/app?application_name=node-1")
//	if err != nil {
//		return err
//	}
//	store, err := postgres.New(ctx, pool, postgres.Config{
//		Namespaces: map[string]int32{"lobby": 1, "staff.email": 2},
//	})
//	if err != nil {
//		return err
//	}
//	defer store.Close()
//
//	l, err := store.Lock(ctx, lockstore.Key{Namespace: "lobby", ID: lobbyID})
//	if err != nil {
//		return err
//	}
//	defer l.Release(context.Background())
//	// ... write, passing l.Token() to a resource that fences stale holders;
//	// stop when <-l.Lost() fires.
//
// Locks live on a small set of dedicated lock connections
// (Config.LockConns, default 2, more while many locks are held: see Many
// locks), opened from the pool's configuration (its credentials,
// application_name and settings), or from Config.LockConnString when it is
// set, but outside the pool: a session holds any
// number of advisory locks, so 1,000 locks held at once need 2
// connections, not 1,000. Distinct keys are spread over the lock
// connections by lock id.
//
// In front of the server, a node-local FIFO queue per lock id lets only one
// claimant per key talk to the server: a session that already holds an
// advisory lock is granted it again, so without the queue two callers on
// one node would both get in. Waiters on one node are served first come
// first served. A key held by another node is polled with
// pg_try_advisory_lock (1ms, doubling up to Config.PollInterval, with
// jitter), so a wait
// never blocks a lock connection that other keys share.
//
// Each lock connection has one owner goroutine. It sends every request
// pending at the time in one round trip (one statement over arrays that
// tries the locks and runs the unlocks), so that 64 concurrent claims cost
// a few round trips, not 64 connections. A caller's context
// never reaches a lock connection (pgx closes a connection whose query is
// cancelled): round trips run under the store's own context, bounded by
// Config.Timeout, and a grant that arrives after its caller gave up is
// unlocked.
//
// Two things ride a round trip the connection makes anyway:
//   - An unlock of ReleaseLater (lockstore.ReleaseLater) waits for another
//     request of its connection to share the round trip, at most 1ms (and
//     never past the connection's next ping), then goes alone; one whose key
//     a claimant of this node waits for goes at once. Until it is confirmed
//     the key stays held, for this node (the next local claimant gets it
//     with the confirmation) and for the others; the ReleaseLater's done is
//     then called with what Release would return. Close sends the unlocks
//     still waiting, so their locks end released, not lost.
//   - A probe (TryLockProbe, lockstore.Probe: a claim's lookup as SQL) runs
//     as a statement of its own pipelined after the batch statement, once
//     per distinct SQL for all the round trip's requests carrying it, so it
//     sees every write committed before the lock was granted. It is prepared
//     on the connection the first time it comes: one that the server
//     refuses fails its own requests (the locks granted with it are
//     unlocked), never the connection or the other requests.
//
// Fencing tokens come from a sequence (Config.Schema, default "claimbus",
// with the epoch tables that keep it rising across crash recovery) read in
// the statement that takes the lock, so they cost no round trip and grow
// across all nodes.
//
// # Serialize, Exclusive and WithTx
//
// A *Store is a lockstore.TxLocker[pgx.Tx, *pgx.Conn]: the contract of
// Serialize, Exclusive, WithTx and their nesting and effects is stated
// there, and lockstoretest.RunTx checks it (see each function for the
// details). What is PostgreSQL's own: Serialize holds the key's
// pg_advisory_xact_lock in its transaction, after a node-local FIFO queue
// per key, and takes it in one round trip with BEGIN and the token; a
// nested call takes a new key's lock in its savepoint, and a rolled-back
// savepoint frees the locks taken inside it; ctx's deadline becomes the
// transaction's lock_timeout, Config.StatementTimeout bounds it otherwise
// (lockstore.ErrTimeout either way). The lock ends with its session:
// a Serialize whose session ended before the commit fails with
// lockstore.ErrLockLost. Exclusive holds the session lock on a connection
// of its own, outside any transaction, and a watcher cancels fn's ctx
// within Config.LeaseBound when the session loses it. WithTx joins a
// transaction on the database the stores lock on, from any Store of it.
//
// # Migrations
//
// The sequence and the epoch tables are created by versioned migrations,
// goose files (github.com/pressly/goose/v3) exported as Migrations and
// recorded in the goose version table claimbus_lockstore_version
// (VersionTable) in Config.Schema. New applies the pending ones, under a
// session advisory lock so that nodes starting together take turns; once
// the schema is at SchemaVersion that costs New one read. The first
// migration adopts a schema an earlier release created (sequence value and
// epoch kept). With Config.NoAutoMigrate, New creates nothing and fails
// with ErrSchemaOutdated until the schema is migrated, by Migrate or by
// goose itself: the files name no schema, so run them with search_path
// set to Config.Schema, the schema created first:
//
//	goose -dir lockstore/postgres/migrations -table claimbus_lockstore_version \
//		postgres "postgres://admin@db/app?search_path=claimbus" up
//
// or, from Go, goose.NewProvider(goose.DialectPostgres, db, postgres.Migrations,
// goose.WithTableName(postgres.VersionTable)) on such a connection.
//
// # Losing a lock: the contract
//
// A network can go silent, so no lock service can promise that two
// holders never overlap; what this store promises is a bounded window, a
// holder that learns of its loss within it, and fencing tokens that let a
// resource refuse the stale holder.
//
//   - Lease bound. A lock is believed held only while its lock connection
//     has confirmed it recently: when no round trip on the connection has
//     succeeded within Config.LeaseBound (default 2s) of the last one that
//     did (counted from when that one was sent), the store closes the
//     connection and closes Lost of every lock on it. An idle connection
//     is pinged KeepAlive after its last round trip, and every round trip
//     must answer within Timeout and before the lease bound, so a healthy
//     holder never trips it (Validate refuses KeepAlive + Timeout >
//     LeaseBound).
//   - Release tells the truth. Release returns nil only when the server
//     confirmed that the session held the lock up to the unlock; an error
//     matching lockstore.ErrLockLost when the lock was lost before, when
//     its connection failed or passed the lease bound before the unlock
//     was confirmed, or when the unlock answered false.
//   - Tokens never go back. Every grant's token is greater than every
//     earlier grant's for that key (and every other key), on every node,
//     across store restarts, reconnects and crash recovery of the server
//     even with synchronous_commit = off (see epoch.go in the source, and
//     docs/postgres-production.md for failover to a replica).
//   - A failed connection frees its locks at once. On any failed or timed
//     out round trip the store closes the socket itself before anything
//     else, so the server ends the session, and frees its locks, as soon
//     as the close reaches it (within a round trip once a network heals).
//   - Serialize and Exclusive carry tokens. fn reads the token of the lock
//     it runs under with lockstore.TokenFrom(ctx); Exclusive's fn ctx is
//     cancelled within LeaseBound of a loss (checked on a connection of
//     the store's own, never the application's pool), and Close cancels
//     running fns (cause lockstore.ErrClosed) and returns within Timeout.
//   - Capacity is per request. A lock past Config.MaxHeld, or one the
//     server's lock table has no room for (SQLSTATE 53200, sized by
//     max_locks_per_transaction), fails that request with an error matching
//     lockstore.ErrCapacity; every other lock stays held.
//
// The window, the longest time two holders may both believe they hold one
// key, by fault (measured figures: docs/RELIABILITY.md):
//
//	fault                                        window
//	holder killed, session terminated, cut       a few ms: the server frees the locks as the
//	  (RST), server shut down or crashed            holder learns it (the socket closes, or
//	                                                says why); measured up to 18ms under load
//	black hole both ways, latency past Timeout   0, unless the server gives the session up
//	                                                first (its tcp_keepalives_*, tcp_user_
//	                                                timeout): then up to LeaseBound
//	server to client silent, then the server     up to LeaseBound: the holder learns only
//	  ends the session (or frees it any way        from the missing answers
//	  the holder cannot hear)
//	process paused (GC, SIGSTOP) past LeaseBound 0 on the server (the socket stays up); the
//	                                                holder's own checks of Lost are late
//
// In every case the window is at most LeaseBound.
//
// To shrink the window, lower LeaseBound (KeepAlive and Timeout follow),
// at the price of a ping per connection every KeepAlive and of losing
// locks to latency spikes past Timeout. Whatever the window, fence: pass
// Token to the resource and have it refuse writes with a lower one (for
// example UPDATE ... SET token = $t WHERE token <= $t); once the next
// holder has written, the stale holder's writes are refused.
//
// After a loss, calls whose keys go to a connection being replaced fail
// fast with an error matching lockstore.ErrUnavailable until it is back
// (Config.ReconnectBackoff). An idle lock connection is read while it
// waits, so a terminated session or a server shutdown is noticed at once.
//
// # Many locks
//
// PostgreSQL walks a session's whole lock table at every statement, so a
// connection holding many locks makes every round trip on it slower. New
// grants go to connections holding fewer than Config.LocksPerConn locks;
// when none is left, the store opens one more (up to MaxHeld /
// LocksPerConn beyond LockConns), and closes it again once it holds
// nothing.
//
// # PgBouncer
//
// Session locks need a direct or session-mode connection. Behind PgBouncer
// in transaction (or statement) mode they would be silently wrong, so New
// checks that each lock connection keeps one server session (its
// pg_backend_pid never changes, and no two connections open at once share
// one) and fails with an error matching ErrNoSession when one does not.
// Serialize's transaction-level locks and the store's lookups are safe
// through such a pooler: let the pool go through it, and give the session
// locks their own connections straight to the server with
// Config.LockConnString:
//
//	pool, _ := pgxpool.New(ctx, "postgres://app@pgbouncer:6432/app?default_query_exec_mode=exec")
//	store, err := postgres.New(ctx, pool, postgres.Config{
//		LockConnString: "postgres://app@db-primary:5432/app",
//	})
//
// See docs/postgres-production.md in the repository for that setup,
// keepalive settings and max_locks_per_transaction.
//
// # Lock ids
//
// A key maps to the two-int advisory lock (namespace int4, id int4), see
// LockID: registered namespaces (Config.Namespaces, 0 to 99) map to their
// number, others to 100 + FNV-1a(name) mod (2^31 - 100); the id to
// FNV-1a(id) & 0x7fffffff. The mapping is pinned by golden tests, so every
// build agrees in one database. In pg_locks a lock shows as locktype
// 'advisory', classid = namespace, objid = id, objsubid = 2. A caller
// taking several keys sorts them with lockstore.SortKeys, which uses
// Store.CompareKeys (the order of lock ids), so two callers never deadlock.
//
// Held lists every two-int advisory lock in the database: this store's own
// in full, other nodes' by lock id and application_name.
package postgres
