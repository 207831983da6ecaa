package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/claimstore/postgres"
	"github.com/claimbus/claimbus/internal/migrate/migratetest"
	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/lockstore"
	lockpg "github.com/claimbus/claimbus/lockstore/postgres"
)

func migrateCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// release0 is the schema the release before versioned migrations created
// at New (createSchema), statement for statement.
func release0(schema string) []string {
	reservations := pgx.Identifier{schema, "claim_reservation"}.Sanitize()
	outcomes := pgx.Identifier{schema, "claim_outcome"}.Sanitize()
	return []string{
		"CREATE SCHEMA IF NOT EXISTS " + pgx.Identifier{schema}.Sanitize(),
		"CREATE TABLE IF NOT EXISTS " + reservations + ` (
			namespace text COLLATE "C" NOT NULL,
			id text COLLATE "C" NOT NULL,
			owner text NOT NULL,
			confirmed bool NOT NULL,
			at timestamptz NOT NULL,
			PRIMARY KEY (namespace, id)) WITH (fillfactor = 80)`,
		"CREATE TABLE IF NOT EXISTS " + outcomes + ` (
			namespace text COLLATE "C" NOT NULL,
			id text COLLATE "C" NOT NULL,
			fingerprint bytea,
			result bytea,
			err bytea,
			expires timestamptz NOT NULL,
			PRIMARY KEY (namespace, id))`,
		`CREATE INDEX IF NOT EXISTS "claim_outcome_expires" ON ` + outcomes + " (expires)",
	}
}

var component = migratetest.Component{
	Migrations: postgres.Migrations, VersionTable: postgres.VersionTable,
}

func appliedVersions(t *testing.T, pool *pgxpool.Pool, schema string) []int64 {
	t.Helper()
	return migratetest.PostgresVersions(migrateCtx(t), t, pool, schema, component)
}

// TestMigrateUpgradesRelease0: tables the earlier release created, with
// rows in them, are adopted by the first migration: New records the
// versions, and the reservation and the outcome are still there.
func TestMigrateUpgradesRelease0(t *testing.T) {
	t.Parallel()
	ctx := migrateCtx(t)
	dsn := pgtest.DSN(t)
	pool := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 4})
	const schema = "Old Claims"
	for _, q := range release0(schema) {
		_, err := pool.Exec(ctx, q)
		require.NoError(t, err, q)
	}
	_, err := pool.Exec(ctx, "INSERT INTO "+pgx.Identifier{schema, "claim_reservation"}.Sanitize()+
		" VALUES ('ns', 'held', 'old-owner', false, now())")
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "INSERT INTO "+pgx.Identifier{schema, "claim_outcome"}.Sanitize()+
		" VALUES ('ns', 'done', NULL, 'r', NULL, now() + interval '1 hour')")
	require.NoError(t, err)

	s := newStore(t, dsn, postgres.Config{Schema: schema})
	require.Equal(t, component.All(), appliedVersions(t, pool, schema))
	held, reserved, err := s.Reserve(ctx, lockstore.Key{Namespace: "ns", ID: "held"}, "new-owner", time.Hour)
	require.NoError(t, err)
	require.False(t, reserved, "the old reservation survives")
	require.Equal(t, "old-owner", held.Owner)
	var outcomes int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "claim_outcome"}.Sanitize()).Scan(&outcomes))
	require.Equal(t, 1, outcomes)
}

// TestMigrateNodesStartingTogether: claim stores and lock stores calling
// New at once on one fresh database and schema all succeed, and each
// component's migrations ran once.
func TestMigrateNodesStartingTogether(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	const nodes = 4
	pools := make([]*pgxpool.Pool, nodes)
	for i := range pools {
		pools[i] = pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 4, ApplicationName: fmt.Sprint("node-", i)})
	}
	errs := make([]error, 2*nodes)
	locks := make([]*lockpg.Store, nodes)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range nodes {
		wg.Go(func() {
			<-start
			_, errs[i] = postgres.New(migrateCtx(t), pools[i], postgres.Config{})
		})
		wg.Go(func() {
			<-start
			locks[i], errs[nodes+i] = lockpg.New(migrateCtx(t), pools[i], lockpg.Config{})
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "store %d", i)
	}
	for _, l := range locks {
		require.NoError(t, l.Close())
	}
	require.Equal(t, component.All(), appliedVersions(t, pools[0], "claimbus"))
	var lockVersions int64
	require.NoError(t, pools[0].QueryRow(migrateCtx(t), "SELECT count(*) FROM "+
		pgx.Identifier{"claimbus", lockpg.VersionTable}.Sanitize()+" WHERE version_id > 0").Scan(&lockVersions))
	require.Equal(t, migratetest.Component{Migrations: lockpg.Migrations}.Latest(), lockVersions)
}

// TestNoAutoMigrate: with NoAutoMigrate, New on an empty database creates
// nothing and fails with ErrSchemaOutdated; once the exported Migrations
// are applied with goose directly (search_path in the connection string,
// the schema created beforehand), it succeeds.
func TestNoAutoMigrate(t *testing.T) {
	t.Parallel()
	ctx := migrateCtx(t)
	dsn := pgtest.DSN(t)
	pool := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 4})
	const schema = "team_claims"
	cfg := postgres.Config{Schema: schema, NoAutoMigrate: true}
	_, err := postgres.New(ctx, pool, cfg)
	require.ErrorIs(t, err, postgres.ErrSchemaOutdated)
	require.ErrorContains(t, err, "Migrate")
	migratetest.RequireNoPostgresSchema(ctx, t, pool, schema)
	migratetest.GooseUpPostgres(ctx, t, pool, dsn, schema, component)

	s, err := postgres.New(ctx, pool, cfg)
	require.NoError(t, err)
	_, reserved, err := s.Reserve(ctx, lockstore.Key{Namespace: "ns", ID: "1"}, "me", time.Hour)
	require.NoError(t, err)
	require.True(t, reserved)
}
