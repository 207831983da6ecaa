package postgres

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/lockext"
	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/internal/testwait"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/lockstoretest"
)

// newTestStore opens a store on pool, closed when t ends.
func newTestStore(t testing.TB, pool *pgxpool.Pool, cfg Config) *Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := New(ctx, pool, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestConformance(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	lockstoretest.Run(t, func(t *testing.T) lockstore.Store {
		pool := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "conformance"})
		return newTestStore(t, pool, Config{})
	})
}

// TestNewWithoutCreatePrivilege runs a node as a role that may not create
// anything: on a schema an earlier release created (the sequence and the
// epoch tables, no version table), New fails to migrate it, and with
// NoAutoMigrate says it is outdated; once an administrator has run Migrate
// and granted SELECT on the version table (docs/postgres-production.md),
// New only reads.
func TestNewWithoutCreatePrivilege(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dsn := pgtest.DSN(t)
	admin := serialAdmin(t, dsn)
	role := fmt.Sprintf("claimbus_app_%d", time.Now().UnixNano())
	for _, stmt := range []string{
		`CREATE ROLE ` + role + ` LOGIN`,
		`REVOKE CREATE ON SCHEMA public FROM PUBLIC`,
		`CREATE SCHEMA claimbus`,
		`CREATE SEQUENCE claimbus.lock_token AS bigint MINVALUE 1 NO CYCLE CACHE 1`,
		`GRANT USAGE ON SCHEMA claimbus TO ` + role,
		`GRANT USAGE, UPDATE ON SEQUENCE claimbus.lock_token TO ` + role,
		`CREATE TABLE claimbus.lock_epoch (id int PRIMARY KEY CHECK (id = 1), epoch bigint NOT NULL)`,
		`INSERT INTO claimbus.lock_epoch VALUES (1, 0)`,
		`CREATE UNLOGGED TABLE claimbus.lock_epoch_live (id int PRIMARY KEY CHECK (id = 1), epoch bigint NOT NULL)`,
		`GRANT SELECT, UPDATE ON claimbus.lock_epoch TO ` + role,
		`GRANT SELECT, INSERT, UPDATE ON claimbus.lock_epoch_live TO ` + role,
	} {
		_, err := admin.Exec(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := admin.Exec(ctx, `DROP OWNED BY `+role)
		require.NoError(t, err)
		_, err = admin.Exec(ctx, `DROP ROLE `+role)
		require.NoError(t, err)
	})
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	u.User = url.User(role)
	pool := pgtest.Connect(t, u.String(), pgtest.PoolConfig{MaxConns: 2, ApplicationName: "restricted"})
	_, err = New(ctx, pool, Config{})
	require.ErrorContains(t, err, "permission denied")
	_, err = New(ctx, pool, Config{NoAutoMigrate: true})
	require.ErrorIs(t, err, ErrSchemaOutdated)
	adminPool := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "admin"})
	require.NoError(t, Migrate(ctx, adminPool, Config{}))
	_, err = admin.Exec(ctx, `GRANT SELECT ON claimbus.`+VersionTable+` TO `+role)
	require.NoError(t, err)
	s, err := New(ctx, pool, Config{NoAutoMigrate: true})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	s, err = New(ctx, pool, Config{})
	require.NoError(t, err)
	l, err := s.TryLock(ctx, lockstore.Key{Namespace: "ns", ID: "1"})
	require.NoError(t, err)
	require.Positive(t, l.Token())
	require.NoError(t, l.Release(ctx))
	// Close before the role's cleanup drops it: the lock connections are
	// sessions of that role.
	require.NoError(t, s.Close())

	// Without the sequence, New says what it could not create.
	_, err = admin.Exec(ctx, `DROP SCHEMA claimbus CASCADE`)
	require.NoError(t, err)
	_, err = New(ctx, pool, Config{})
	require.ErrorContains(t, err, `create schema "claimbus"`)
	require.ErrorContains(t, err, "permission denied")
}

// TestTryLockDoesNotQueueBehindABusyConnection: a try-lock whose lock
// connection has a round trip in flight goes to another connection that
// has none, instead of waiting for that round trip to end.
func TestTryLockDoesNotQueueBehindABusyConnection(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dsn := pgtest.DSN(t)
	// A round trip may last 40s, its probe 20s (half of it): the test ends
	// the slow one, not a timeout.
	s := newTestStore(t, pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "spill"}),
		Config{LockConns: 2, LeaseBound: 80 * time.Second, KeepAlive: 20 * time.Second, Timeout: 40 * time.Second})
	admin := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "spill-admin"})

	// The test holds advisory lock (7, 7) on a session of its own, and a
	// probe asks for it shared: the round trip carrying the probe stays in
	// flight until the test lets go.
	gate, err := admin.Acquire(ctx)
	require.NoError(t, err)
	defer gate.Release()
	_, err = gate.Exec(ctx, "SELECT pg_advisory_lock(7, 7)")
	require.NoError(t, err)
	unlocked := false
	unlock := func() {
		if !unlocked {
			unlocked = true
			_, err := gate.Exec(ctx, "SELECT pg_advisory_unlock(7, 7)")
			require.NoError(t, err)
		}
	}
	defer unlock()

	busy := (*s.active.Load())[0]
	slowKey, fastKey := keyOn(t, s, busy, "slow"), keyOn(t, s, busy, "fast")
	probe := lockext.Probe{SQL: `SELECT v FROM unnest($1::text[]) AS t(v), LATERAL (SELECT pg_advisory_xact_lock_shared(7, 7)) AS w`, Value: "x"}
	slow := make(chan error, 1)
	go func() {
		l, _, err := s.TryLockProbe(ctx, slowKey, probe)
		if err == nil {
			err = l.Release(ctx)
		}
		slow <- err
	}()
	waitFor(t, "the probe waits for the test's lock", func() bool {
		var n int
		require.NoError(t, admin.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND classid = 7 AND objid = 7
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&n))
		return n == 1
	})

	l, err := s.TryLock(ctx, fastKey)
	require.NoError(t, err)
	require.Empty(t, slow, "taken while the other round trip was still in flight")
	require.NotSame(t, busy, l.(*pgLock).c, "on the connection without a round trip in flight")
	require.NoError(t, l.Release(ctx))
	unlock()
	require.NoError(t, testwait.Recv(t, slow, 20*time.Second, "the slow try-lock"))
}

// keyOn returns a key whose lock id spreads to c (see connFor), with an id
// that starts with prefix.
func keyOn(t *testing.T, s *Store, c *lockConn, prefix string) lockstore.Key {
	t.Helper()
	active := *s.active.Load()
	for i := 0; ; i++ {
		k := lockstore.Key{Namespace: "spill", ID: fmt.Sprint(prefix, i)}
		id, err := s.lockID(k)
		require.NoError(t, err)
		if active[spread(id, len(active))] == c {
			return k
		}
	}
}

// TestTryLockWhileItsConnectionIsDown: while one lock connection is down
// (its session ended, and the server refuses new sessions), a try-lock
// whose key spreads to it goes to another that is up instead of failing
// with lockstore.ErrUnavailable.
func TestTryLockWhileItsConnectionIsDown(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dsn := pgtest.DSN(t)
	s := newTestStore(t, pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "down"}), Config{LockConns: 2})
	admin, allow := refuseSessions(ctx, t, dsn, "postgres")

	down := (*s.active.Load())[1]
	terminateBackend(ctx, t, admin, connPIDs(s)[down.index])
	waitFor(t, "the connection is down", func() bool { return down.avail.Load() == connDown })
	l, err := s.TryLock(ctx, keyOn(t, s, down, "down"))
	require.NoError(t, err, "taken on the connection that is up")
	require.NotSame(t, down, l.(*pgLock).c)
	require.NoError(t, l.Release(ctx))

	allow()
	waitFor(t, "the connection is back", func() bool { return down.avail.Load() == connFree })
}
