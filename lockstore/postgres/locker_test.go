package postgres

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/pgtest"
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
