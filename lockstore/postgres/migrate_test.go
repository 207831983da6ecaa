package postgres

import (
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/migrate/migratetest"
	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/lockstore"
)

// release0 is the schema the release before versioned migrations created
// at New (createSchema and epochSchemaSQL), statement for statement.
func release0(schema string) []string {
	seq := pgx.Identifier{schema, "lock_token"}.Sanitize()
	epoch := pgx.Identifier{schema, "lock_epoch"}.Sanitize()
	live := pgx.Identifier{schema, "lock_epoch_live"}.Sanitize()
	return []string{
		"CREATE SCHEMA IF NOT EXISTS " + pgx.Identifier{schema}.Sanitize(),
		"CREATE SEQUENCE IF NOT EXISTS " + seq + " AS bigint MINVALUE 1 NO CYCLE CACHE 1",
		"CREATE TABLE IF NOT EXISTS " + epoch + " (id int PRIMARY KEY CHECK (id = 1), epoch bigint NOT NULL)",
		"INSERT INTO " + epoch + " (id, epoch) VALUES (1, 0) ON CONFLICT (id) DO NOTHING",
		"CREATE UNLOGGED TABLE IF NOT EXISTS " + live + " (id int PRIMARY KEY CHECK (id = 1), epoch bigint NOT NULL)",
	}
}

var component = migratetest.Component{Migrations: Migrations, VersionTable: VersionTable}

func appliedVersions(t *testing.T, pool *pgxpool.Pool, schema string) []int64 {
	t.Helper()
	return migratetest.PostgresVersions(testCtx(t), t, pool, schema, component)
}

func drawToken(t *testing.T, s *Store) int64 {
	t.Helper()
	ctx := testCtx(t)
	l, err := s.TryLock(ctx, lockstore.Key{Namespace: "ns", ID: "1"})
	require.NoError(t, err)
	token := l.Token()
	require.NoError(t, l.Release(ctx))
	return token
}

// TestMigrateUpgradesRelease0: a schema the earlier releases created (the
// sequence and the epoch tables; before that, the sequence alone), with
// tokens handed out, is adopted by the first migration: New records the
// versions and tokens keep rising past the ones handed out.
func TestMigrateUpgradesRelease0(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		stmts func(schema string) []string
	}{
		{"SequenceAndEpoch", release0},
		{"SequenceOnly", func(schema string) []string { return release0(schema)[:2] }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			pool := pgtest.Pool(t, pgtest.PoolConfig{MaxConns: 4})
			const schema = "Old Locks"
			for _, q := range tc.stmts(schema) {
				_, err := pool.Exec(ctx, q)
				require.NoError(t, err, q)
			}
			// Tokens of the last run: epoch 5, and some drawn in it.
			seq := pgx.Identifier{schema, "lock_token"}.Sanitize()
			last := int64(5)<<32 + 7
			_, err := pool.Exec(ctx, "SELECT setval($1::regclass, $2)", seq, last)
			require.NoError(t, err)
			if len(tc.stmts(schema)) > 2 {
				_, err = pool.Exec(ctx, "UPDATE "+pgx.Identifier{schema, "lock_epoch"}.Sanitize()+" SET epoch = 5")
				require.NoError(t, err)
			}

			s := newTestStore(t, pool, Config{Schema: schema})
			require.Equal(t, component.All(), appliedVersions(t, pool, schema))
			require.Greater(t, drawToken(t, s), last)
			var epoch int64
			require.NoError(t, pool.QueryRow(ctx, "SELECT epoch FROM "+pgx.Identifier{schema, "lock_epoch"}.Sanitize()).Scan(&epoch))
			if len(tc.stmts(schema)) > 2 {
				require.Greater(t, epoch, int64(5), "the epoch survives and is bumped")
			}
		})
	}
}

// TestMigrateFreshDatabase: New on an empty database creates the schema
// and records every version once; a second New on it migrates nothing.
func TestMigrateFreshDatabase(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t, pgtest.PoolConfig{MaxConns: 4})
	s := newTestStore(t, pool, Config{})
	require.Equal(t, component.All(), appliedVersions(t, pool, defaultSchema))
	first := drawToken(t, s)
	s2 := newTestStore(t, pool, Config{})
	require.Equal(t, component.All(), appliedVersions(t, pool, defaultSchema))
	require.Greater(t, drawToken(t, s2), first)
}

// TestMigrateNodesStartingTogether: nodes calling New at once on a fresh
// database all succeed, and the migrations ran once.
func TestMigrateNodesStartingTogether(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	const nodes = 4
	pools := make([]*pgxpool.Pool, nodes)
	for i := range pools {
		pools[i] = pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 4, ApplicationName: fmt.Sprint("node-", i)})
	}
	stores := make([]*Store, nodes)
	errs := make([]error, nodes)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range nodes {
		wg.Go(func() {
			<-start
			stores[i], errs[i] = New(testCtx(t), pools[i], Config{})
		})
	}
	close(start)
	wg.Wait()
	for i := range nodes {
		require.NoError(t, errs[i], "node %d", i)
		require.NoError(t, stores[i].Close())
	}
	require.Equal(t, component.All(), appliedVersions(t, pools[0], defaultSchema))
}

// TestNoAutoMigrate: with NoAutoMigrate, New on an empty database creates
// nothing and fails with ErrSchemaOutdated; once the exported Migrations
// are applied with goose directly (search_path in the connection string,
// the schema created beforehand, as docs/postgres-production.md says), it
// succeeds.
func TestNoAutoMigrate(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dsn := pgtest.DSN(t)
	pool := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 4})
	const schema = "team_locks"
	cfg := Config{Schema: schema, NoAutoMigrate: true}
	_, err := New(ctx, pool, cfg)
	require.ErrorIs(t, err, ErrSchemaOutdated)
	require.ErrorContains(t, err, "Migrate")
	migratetest.RequireNoPostgresSchema(ctx, t, pool, schema)
	migratetest.GooseUpPostgres(ctx, t, pool, dsn, schema, component)

	s := newTestStore(t, pool, cfg)
	require.Positive(t, drawToken(t, s))
	require.Equal(t, component.All(), appliedVersions(t, pool, schema))
}
