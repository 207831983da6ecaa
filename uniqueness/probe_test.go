package uniqueness_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/commands"
	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/lockstoretest"
	"github.com/claimbus/claimbus/lockstore/postgres"
	"github.com/claimbus/claimbus/middleware"
	"github.com/claimbus/claimbus/uniqueness"
)

// countedDB is a pool that counts the queries run on it: the lookups of a
// FieldSQL rule that its probe did not answer.
type countedDB struct {
	pool  *pgxpool.Pool
	calls *atomic.Int64
}

func (d countedDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	d.calls.Add(1)
	return d.pool.Query(ctx, sql, args...)
}

// newProbedBus starts a bus on PostgreSQL whose Uniqueness middleware has
// the one rule that rule makes on a staff table and a pool counting its
// queries (the lookups no probe answered, in lookups).
func newProbedBus(t *testing.T, rule func(table *pgTable, db countedDB) uniqueness.Rule) (b *bus.Bus, store *postgres.Store, h *staffHandler, lookups *atomic.Int64) {
	t.Helper()
	pool := pgtest.Pool(t, pgtest.PoolConfig{MaxConns: 4})
	table := newPGTable(t, pool)
	store = newPGStore(t, pool)
	lookups = new(atomic.Int64)
	h = &staffHandler{table: table}
	mw := newUniqueness(t, uniqueness.Config{Locker: store, Rules: []uniqueness.Rule{rule(table, countedDB{pool, lookups})}})
	return newBus(t, bus.Config{Middleware: []middleware.Middleware{mw}}, h), store, h, lookups
}

// TestProbeAnswersTheUncontendedClaim: with a FieldSQL rule on the
// PostgreSQL store, an uncontended claim is answered in the lock's round
// trip: the lookup never runs on the pool, a free email is created and a
// taken one is rejected as already_taken.
func TestProbeAnswersTheUncontendedClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, store, h, lookups := newProbedBus(t, func(table *pgTable, db countedDB) uniqueness.Rule {
		return emailRuleSQL(table, db, staffTakenSQL)
	})

	for i := range 20 {
		e := fmt.Sprintf("probe%d@example.org", i)
		_, err := bus.Dispatch[string](ctx, b, &commands.CreateStaff{StaffID: e, Email: e, Name: "P"})
		require.NoError(t, err)
	}
	_, err := bus.Dispatch[string](ctx, b, &commands.CreateStaff{StaffID: "other", Email: "PROBE3@example.org", Name: "P"})
	require.ErrorIs(t, err, middleware.ErrAlreadyTaken, "the probe found the normalised email")
	require.Zero(t, lookups.Load(), "every claim was answered by its probe")
	require.EqualValues(t, 20, h.runs.Load())
	require.Zero(t, h.duplicates.Load())
	requireNothingHeld(t, store)
}

// TestTakenByAnswersInTheLocksRoundTrip: with TakenBy, the probe's second
// column tells who took the email, so a retry of the command that took it
// (the same staff id) is done and another command is already_taken, both
// answered in the lock's round trip, with no query on the pool and the
// handler run once.
func TestTakenByAnswersInTheLocksRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, store, h, lookups := newProbedBus(t, func(_ *pgTable, db countedDB) uniqueness.Rule {
		return uniqueness.FieldSQL(uniqueness.Names{Field: "email", Scope: "staff.email"},
			func(c *commands.CreateStaff) string { return c.Email }, db,
			`SELECT email, id FROM staff WHERE email = ANY($1)`,
			uniqueness.Normalize(uniqueness.NormalizeEmail),
			uniqueness.TakenBy(func(c *commands.CreateStaff) string { return c.StaffID }))
	})

	// Each once the last one's unlock, which rides a later round trip, is
	// applied on this node: a claim that finds the key still held waits,
	// and looks up on the pool.
	key := lockstore.Key{Namespace: "staff.email", ID: "ann@x.org"}
	id, err := bus.Dispatch[string](ctx, b, &commands.CreateStaff{StaffID: "s1", Email: "ann@x.org", Name: "Ann"})
	require.NoError(t, err)
	require.Equal(t, "s1", id)
	lockstoretest.WaitTakeable(t, store, key)
	id, err = bus.Dispatch[string](ctx, b, &commands.CreateStaff{StaffID: "s1", Email: " ANN@x.org", Name: "Ann"})
	require.NoError(t, err, "a retry of the command that took the email is done")
	require.Empty(t, id, "done: its handler did not run")
	lockstoretest.WaitTakeable(t, store, key)
	_, err = bus.Dispatch[string](ctx, b, &commands.CreateStaff{StaffID: "s2", Email: "ann@x.org", Name: "Bob"})
	require.ErrorIs(t, err, middleware.ErrAlreadyTaken)
	require.EqualValues(t, 1, h.runs.Load())
	require.Zero(t, lookups.Load(), "the probes told who took the email")
	requireNothingHeld(t, store)
}

// TestProbeStormAcrossTwoNodesOnPostgres is the two-node storm with a
// FieldSQL rule on both nodes, where probed claims meet claims that wait
// and run the lookup on the pool: the outcome is the storm's, one handler run per email and
// the unique index never fires. (That a probe answers the uncontended
// claim is TestProbeAnswersTheUncontendedClaim's.)
func TestProbeStormAcrossTwoNodesOnPostgres(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	var buses []*bus.Bus
	var handlers []*staffHandler
	var table *pgTable
	for i, name := range []string{"node-a", "node-b"} {
		pool := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 8, ApplicationName: name})
		if i == 0 {
			table = newPGTable(t, pool)
		}
		nodeTable := &pgTable{pool: pool}
		store := newPGStore(t, pool)
		t.Cleanup(func() { requireNothingHeld(t, store) })
		h := &staffHandler{table: nodeTable}
		rule := emailRuleSQL(nodeTable, pool, staffTakenSQL)
		mw := newUniqueness(t, uniqueness.Config{Locker: store, Rules: []uniqueness.Rule{rule}})
		buses = append(buses, newBus(t, bus.Config{Middleware: []middleware.Middleware{mw}}, h))
		handlers = append(handlers, h)
	}
	requireStormOutcome(t, storm(t, buses, 200, 20), table, handlers...)
}

// TestProbeFailingIsUnavailable: a probe the server refuses rejects the
// command as unavailable, naming neither the table nor the driver, and
// leaves the key free: the same email is then created through a rule
// with a good lookup, on the same store.
func TestProbeFailingIsUnavailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t, pgtest.PoolConfig{MaxConns: 4})
	table := newPGTable(t, pool)
	store := newPGStore(t, pool)
	broken := emailRuleSQL(table, pool, "SELECT email FROM no_such_table WHERE email = ANY($1)")
	h := &staffHandler{table: table}
	b := newBus(t, bus.Config{Middleware: []middleware.Middleware{newUniqueness(t, uniqueness.Config{Locker: store, Rules: []uniqueness.Rule{broken}})}}, h)

	cmd := &commands.CreateStaff{StaffID: "s1", Email: "broken@example.org", Name: "P"}
	_, err := bus.Dispatch[string](ctx, b, cmd)
	require.ErrorIs(t, err, middleware.ErrUnavailable)
	var rej *middleware.Rejection
	require.ErrorAs(t, err, &rej)
	require.Equal(t, "email", rej.Field)
	require.NotContains(t, rej.Message, "no_such_table")
	require.NotContains(t, rej.Message, "SQLSTATE")
	require.Zero(t, h.runs.Load())

	good := newBus(t, bus.Config{Middleware: []middleware.Middleware{newUniqueness(t, uniqueness.Config{Locker: store, Rules: []uniqueness.Rule{emailRule(table)}})}}, h)
	_, err = bus.Dispatch[string](ctx, good, cmd)
	require.NoError(t, err, "the broken probe left the key free")
	require.EqualValues(t, 1, h.runs.Load())
	requireNothingHeld(t, store)
}

// TestProbeOnAStoreThatCannotRunIt: on a Locker that is not a
// lockext.Prober (the memory store) a FieldSQL rule runs its lookup on
// the pool.
func TestProbeOnAStoreThatCannotRunIt(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t, pgtest.PoolConfig{MaxConns: 4})
	table := newPGTable(t, pool)
	var lookups atomic.Int64
	rule := emailRuleSQL(table, countedDB{pool, &lookups}, staffTakenSQL)
	h := &staffHandler{table: table}
	b := newBus(t, bus.Config{Middleware: []middleware.Middleware{newUniqueness(t, uniqueness.Config{Locker: newMemory(t), Rules: []uniqueness.Rule{rule}})}}, h)
	_, err := bus.Dispatch[string](context.Background(), b, &commands.CreateStaff{StaffID: "m", Email: "m@example.org", Name: "M"})
	require.NoError(t, err)
	_, err = bus.Dispatch[string](context.Background(), b, &commands.CreateStaff{StaffID: "n", Email: "M@example.org", Name: "M"})
	require.ErrorIs(t, err, middleware.ErrAlreadyTaken)
	require.EqualValues(t, 2, lookups.Load())
}
