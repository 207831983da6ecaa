// Package postgres is the PostgreSQL backend of lockstore: a Store whose
// locks are session advisory locks, so that every node sharing one
// database behaves as one, plus Serialize and Exclusive for critical
// sections that run in (or beside) a transaction.
//
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
// Locks live on a few lock connections of the store's own beside the pool
// (one session holds any number of advisory locks); a node's claimants of
// one key queue in Go, and the requests pending on a connection share one
// round trip. Fencing tokens rise across all nodes, restarts and crash
// recovery. New applies the migrations unless Config.NoAutoMigrate is set.
//
// A lock is believed held only within Config.LeaseBound of its
// connection's last confirmed round trip; after that Lost closes. Release
// returns nil only when the server confirmed the lock was held up to the
// unlock, else an error matching lockstore.ErrLockLost. Two holders can
// overlap for at most LeaseBound, so fence writes with Token. Session
// locks need a direct or session-mode connection: through a pooler in
// transaction mode New fails with ErrNoSession (see Config.LockConnString).
//
// docs/lockstore.md#lockstorepostgres has the details: lock connections,
// Serialize, Exclusive, migrations, losing a lock and its window by fault,
// many locks, PgBouncer, lock ids; docs/postgres-production.md, operations.
package postgres
