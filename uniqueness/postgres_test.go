package uniqueness_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/lockstore/postgres"
	"github.com/claimbus/claimbus/middleware"
	"github.com/claimbus/claimbus/uniqueness"
)

// pgTable is a staffTable on a PostgreSQL table with a unique index on
// email, the backstop the claims must keep from firing.
type pgTable struct {
	pool *pgxpool.Pool
}

const pgStaffSchema = `CREATE TABLE staff (
	id    text PRIMARY KEY,
	email text NOT NULL,
	name  text NOT NULL
);
CREATE UNIQUE INDEX staff_email ON staff (email);`

func newPGTable(t testing.TB, pool *pgxpool.Pool) *pgTable {
	t.Helper()
	_, err := pool.Exec(context.Background(), pgStaffSchema)
	require.NoError(t, err)
	return &pgTable{pool: pool}
}

func (s *pgTable) taken(ctx context.Context, email string) (bool, error) {
	var ok bool
	err := s.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM staff WHERE email = $1)", email).Scan(&ok)
	return ok, err
}

// staffTakenSQL finds which of the emails $1 are taken: the lookup of the
// rules made with uniqueness.FieldSQL.
const staffTakenSQL = "SELECT email FROM staff WHERE email = ANY($1)"

func (s *pgTable) owner(ctx context.Context, email string) (string, error) {
	var id string
	err := s.pool.QueryRow(ctx, "SELECT id FROM staff WHERE email = $1", email).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return id, err
}

func (s *pgTable) insert(ctx context.Context, id, email, name string) error {
	_, err := s.pool.Exec(ctx, "INSERT INTO staff (id, email, name) VALUES ($1, $2, $3)", id, email, name)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return errDuplicate
	}
	return err
}

func (s *pgTable) count(ctx context.Context) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, "SELECT count(*) FROM staff").Scan(&n)
	return n, err
}

// newPGStore opens a PostgreSQL lock store on pool, closed when t ends.
func newPGStore(t testing.TB, pool *pgxpool.Pool) *postgres.Store {
	t.Helper()
	store, err := postgres.New(context.Background(), pool, postgres.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	return store
}

// The sign-up storm with the PostgreSQL store as the locker and a staff
// table in the same database as the lookup.
func TestStormOnPostgres(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t, pgtest.PoolConfig{MaxConns: 16})
	table := newPGTable(t, pool)
	stormOnStore(t, newPGStore(t, pool), table)
}

// The storm across two nodes: two buses, each with its own pool and
// PostgreSQL store on one database, sharing the staff table. Only the
// database's advisory locks keep the nodes apart.
func TestStormAcrossTwoNodesOnPostgres(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	var buses []*bus.Bus
	var handlers []*staffHandler
	var stores []*postgres.Store
	var table *pgTable
	for i, name := range []string{"node-a", "node-b"} {
		pool := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 8, ApplicationName: name})
		if i == 0 {
			table = newPGTable(t, pool)
		}
		nodeTable := &pgTable{pool: pool}
		store := newPGStore(t, pool)
		h := &staffHandler{table: nodeTable}
		mw := newUniqueness(t, uniqueness.Config{Locker: store, Rules: []uniqueness.Rule{emailRuleWith(nodeTable, nodeTable.taken)}})
		buses = append(buses, newBus(t, bus.Config{Middleware: []middleware.Middleware{mw}}, h))
		handlers = append(handlers, h)
		stores = append(stores, store)
	}

	requireStormOutcome(t, storm(t, buses, 200, 20), table, handlers...)
	for _, s := range stores {
		requireNothingHeld(t, s)
	}
}
