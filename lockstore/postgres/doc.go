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
// Locks live on a small fixed set of dedicated lock connections
// (Config.LockConns, default 2), opened from the pool's configuration (its
// credentials, application_name and settings) but outside the pool: a
// session holds any number of advisory locks, so 1,000 locks held at once
// need 2 connections, not 1,000. Distinct keys are spread over the lock
// connections by lock id.
//
// In front of the server, a node-local FIFO queue per lock id lets only one
// claimant per key talk to the server: a session that already holds an
// advisory lock is granted it again, so without the queue two callers on
// one node would both get in. Waiters on one node are served first come
// first served. A key held by another node is polled with
// pg_try_advisory_lock (1ms, doubling up to Config.PollInterval), so a wait
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
// Fencing tokens come from a sequence (Config.Schema, default "claimbus",
// created by New when missing) read in the statement that takes the lock,
// so they cost no round trip and grow across all nodes.
//
// # Losing a lock
//
// Release runs pg_advisory_unlock and checks its answer. When the answer is
// false or missing, when a round trip or a ping fails or times out, or when
// the server ends the session, the store closes that lock connection (the
// server frees its locks; a connection in doubt is never reused), closes
// Lost of every lock it held, and reconnects with backoff
// (Config.ReconnectBackoff). Meanwhile calls whose keys live on that
// connection fail fast with an error matching lockstore.ErrUnavailable.
// An idle lock connection is read while it waits, so a terminated session
// or a server shutdown is noticed at once; a peer that went silent is
// noticed within Config.KeepAlive + Config.Timeout (ping, and TCP
// keepalive probes).
//
// Session locks need a direct or session-mode connection: see
// docs/postgres-production.md in the repository for PgBouncer, keepalive
// settings and max_locks_per_transaction.
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
