package uniqueness_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/claimstore"
	claimpg "github.com/claimbus/claimbus/claimstore/postgres"
	"github.com/claimbus/claimbus/commands"
	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/postgres"
	"github.com/claimbus/claimbus/middleware"
	"github.com/claimbus/claimbus/uniqueness"
)

// pgEvents is an event-sourced staff model on PostgreSQL: the handler
// appends to staff_events (no unique index), and a projection copies each
// event into staff_read once it is lag old. staff_read's unique index is
// the backstop: the projection counts the events it refused.
type pgEvents struct {
	pool *pgxpool.Pool
	lag  time.Duration

	mu       sync.Mutex
	applied  int64
	backstop int
}

const pgEventsSchema = `CREATE TABLE staff_events (
	seq   bigserial PRIMARY KEY,
	id    text NOT NULL,
	email text NOT NULL,
	at    timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE staff_read (
	id    text PRIMARY KEY,
	email text NOT NULL
);
CREATE UNIQUE INDEX staff_read_email ON staff_read (email);`

func newPGEvents(t testing.TB, pool *pgxpool.Pool, lag time.Duration) *pgEvents {
	t.Helper()
	_, err := pool.Exec(context.Background(), pgEventsSchema)
	require.NoError(t, err)
	return &pgEvents{pool: pool, lag: lag}
}

// taken is the lookup: it reads the read model, which lags.
func (e *pgEvents) taken(ctx context.Context, email string) (bool, error) {
	var ok bool
	err := e.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM staff_read WHERE email = $1)", email).Scan(&ok)
	return ok, err
}

// appendEvent is the handler's write: it commits at once.
func (e *pgEvents) appendEvent(ctx context.Context, id, email string) error {
	_, err := e.pool.Exec(ctx, "INSERT INTO staff_events (id, email) VALUES ($1, $2)", id, email)
	return err
}

// project applies, in order, the events at least lag old that it has not
// applied yet, and returns how many are still to come.
func (e *pgEvents) project(ctx context.Context) (pending int, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	rows, err := e.pool.Query(ctx, `SELECT seq, id, email, at < clock_timestamp() - $2::interval
		FROM staff_events WHERE seq > $1 ORDER BY seq`, e.applied, e.lag)
	if err != nil {
		return 0, err
	}
	type event struct {
		seq       int64
		id, email string
		due       bool
	}
	var evs []event
	for rows.Next() {
		var ev event
		if err := rows.Scan(&ev.seq, &ev.id, &ev.email, &ev.due); err != nil {
			return 0, err
		}
		evs = append(evs, ev)
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	for i, ev := range evs {
		if !ev.due {
			return len(evs) - i, nil
		}
		tag, err := e.pool.Exec(ctx, "INSERT INTO staff_read (id, email) VALUES ($1, $2) ON CONFLICT DO NOTHING", ev.id, ev.email)
		if err != nil {
			return 0, err
		}
		if tag.RowsAffected() == 0 {
			e.backstop++
		}
		e.applied = ev.seq
	}
	return 0, nil
}

// run projects until ctx ends, as a projection process does.
func (e *pgEvents) run(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if _, err := e.project(ctx); err != nil && ctx.Err() == nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// catchUp waits until every event is projected.
func (e *pgEvents) catchUp(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool {
		n, err := e.project(context.Background())
		require.NoError(t, err)
		return n == 0
	}, waitFor, 10*time.Millisecond)
}

// eventsPerEmail returns the largest number of events one email got, and
// the number of events.
func (e *pgEvents) eventsPerEmail(t *testing.T) (most, total int) {
	t.Helper()
	err := e.pool.QueryRow(context.Background(),
		"SELECT coalesce(max(n), 0), coalesce(sum(n), 0) FROM (SELECT count(*) AS n FROM staff_events GROUP BY email) c").Scan(&most, &total)
	require.NoError(t, err)
	return most, total
}

func (e *pgEvents) rule(store claimstore.Store, maxLag time.Duration) uniqueness.Rule {
	opts := []uniqueness.Option{uniqueness.Normalize(uniqueness.NormalizeEmail)}
	if store != nil {
		opts = append(opts, uniqueness.Reserve(store, maxLag))
	}
	return uniqueness.Field(uniqueness.Names{Field: "email", Scope: "staff.email"},
		func(c *commands.CreateStaff) string { return c.Email }, e.taken, opts...)
}

func (e *pgEvents) handler(ctx context.Context, c *commands.CreateStaff) (string, error) {
	if err := e.appendEvent(ctx, c.StaffID, uniqueness.NormalizeEmail(c.Email)); err != nil {
		return "", err
	}
	if err := uniqueness.Committed(ctx); err != nil {
		return "", err
	}
	return c.StaffID, nil
}

// newReservations opens the PostgreSQL claim store on pool.
func newReservations(t testing.TB, pool *pgxpool.Pool) claimstore.Store {
	t.Helper()
	s, err := claimpg.New(context.Background(), pool, claimpg.Config{})
	require.NoError(t, err)
	return s
}

// pgNode is one node of a test: its pool, lock store, claim store and
// Uniqueness middleware.
type pgNode struct {
	pool         *pgxpool.Pool
	locks        *postgres.Store
	reservations claimstore.Store
	mw           *uniqueness.Middleware
	bus          *bus.Bus
}

// newPGNodes starts n nodes on the database of dsn, reserving unless
// reserve is false, each with a bus whose handler appends to events.
func newPGNodes(t *testing.T, dsn string, n int, events func(*pgxpool.Pool) *pgEvents, reserve bool, maxLag time.Duration) []*pgNode {
	t.Helper()
	var nodes []*pgNode
	for i := range n {
		pool := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 8, ApplicationName: "node-" + string(rune('a'+i))})
		nd := &pgNode{pool: pool, locks: newPGStore(t, pool)}
		ev := events(pool)
		var store claimstore.Store
		if reserve {
			nd.reservations = newReservations(t, pool)
			store = nd.reservations
		}
		nd.mw = newUniqueness(t, uniqueness.Config{Locker: nd.locks, Rules: []uniqueness.Rule{ev.rule(store, maxLag)}})
		nd.bus = startBus(t, nd.mw, handler(ev.handler))
		nodes = append(nodes, nd)
	}
	return nodes
}

// An event-sourced storm over two nodes on one database whose projection
// lags 300 ms: with reservations, one StaffRegistered per email and the
// backstop never fires; without them, the same storm lets duplicates
// through (so the test can fail).
func TestEventSourcedStormOnPostgres(t *testing.T) {
	t.Parallel()
	for _, reserve := range []bool{true, false} {
		t.Run(map[bool]string{true: "reservations", false: "none"}[reserve], func(t *testing.T) {
			t.Parallel()
			dsn := pgtest.DSN(t)
			var projection *pgEvents
			nodes := newPGNodes(t, dsn, 2, func(pool *pgxpool.Pool) *pgEvents {
				if projection == nil {
					projection = newPGEvents(t, pool, 300*time.Millisecond)
				}
				return &pgEvents{pool: pool}
			}, reserve, time.Minute)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- projection.run(ctx) }()
			defer func() { cancel(); require.NoError(t, <-done) }()

			res := storm(t, []*bus.Bus{nodes[0].bus, nodes[1].bus}, 200, 20)
			projection.catchUp(t)
			most, total := projection.eventsPerEmail(t)
			if !reserve {
				require.Greater(t, total, 20, "without reservations the lagging read model lets duplicates through")
				require.Positive(t, projection.backstop)
				return
			}
			require.EqualValues(t, 20, res.ok.Load())
			require.EqualValues(t, 180, res.taken.Load())
			require.Equal(t, 1, most, "one StaffRegistered per email")
			require.Equal(t, 20, total)
			require.Zero(t, projection.backstop, "the backstop never fires")

			// The projection caught up: a sweep leaves the table empty. (The
			// claims of the storm already dropped the reservations of the
			// values their lookups found shown.)
			for _, nd := range nodes {
				require.NoError(t, nd.mw.Flush(context.Background()))
			}
			sweep, err := nodes[1].mw.Sweep(context.Background())
			require.NoError(t, err)
			require.Zero(t, sweep.Kept, "%+v", sweep)
			require.Zero(t, sweep.Expired, "%+v", sweep)
			require.LessOrEqual(t, sweep.Dropped, 20)
			rs, err := nodes[0].reservations.List(context.Background(), "staff.email", "", 100)
			require.NoError(t, err)
			require.Empty(t, rs)
			for _, nd := range nodes {
				requireNothingHeld(t, nd.locks)
			}
		})
	}
}

// newTwoReservingNodes starts two reserving nodes on a fresh database,
// sharing one event table with no projection lag (the first node creates
// it), and returns them with the table.
func newTwoReservingNodes(t *testing.T, maxLag time.Duration) ([]*pgNode, *pgEvents) {
	t.Helper()
	var events *pgEvents
	nodes := newPGNodes(t, pgtest.DSN(t), 2, func(pool *pgxpool.Pool) *pgEvents {
		if events == nil {
			events = newPGEvents(t, pool, 0)
		}
		return &pgEvents{pool: pool}
	}, true, maxLag)
	return nodes, events
}

// A node dies between its handler's commit and the confirmation (its lock
// store closes: its locks are gone): the other node finds the value taken,
// and, when the write never happened, free again once maxLag has passed.
func TestNodeDiesBeforeConfirmOnPostgres(t *testing.T) {
	t.Parallel()
	const maxLag = time.Second
	for _, written := range []bool{true, false} {
		t.Run(map[bool]string{true: "write committed", false: "write lost"}[written], func(t *testing.T) {
			t.Parallel()
			nodes, events := newTwoReservingNodes(t, maxLag)
			ctx := context.Background()
			dead, alive := nodes[0], nodes[1]

			p := middleware.NewPipeline(ctx, &commands.CreateStaff{StaffID: "dead", Email: "ann@x.org", Name: "Ann"})
			p.CommandUUID = "cmd-dead"
			dead.mw.BeforeDispatch(ctx, p)
			require.False(t, p.Halted(), "%v", p.Err())
			if written {
				require.NoError(t, events.appendEvent(ctx, "dead", "ann@x.org"))
			}
			require.NoError(t, dead.locks.Close()) // the node dies: its locks go

			_, err := bus.Dispatch[string](ctx, alive.bus, &commands.CreateStaff{StaffID: "alive", Email: "ANN@x.org", Name: "Ann"})
			require.ErrorIs(t, err, middleware.ErrAlreadyTaken, "in doubt: taken")
			if written {
				// The read model (no lag here) shows the write: taken
				// for good, and the reservation is gone.
				_, err := events.project(ctx)
				require.NoError(t, err)
				_, err = bus.Dispatch[string](ctx, alive.bus, &commands.CreateStaff{StaffID: "alive", Email: "ann@x.org", Name: "Ann"})
				require.ErrorIs(t, err, middleware.ErrAlreadyTaken)
				rs, err := alive.reservations.List(ctx, "staff.email", "", 10)
				require.NoError(t, err)
				require.Empty(t, rs, "dropped once shown")
				return
			}
			require.Eventually(t, func() bool {
				_, err := bus.Dispatch[string](ctx, alive.bus, &commands.CreateStaff{StaffID: "alive", Email: "ann@x.org", Name: "Ann"})
				if err != nil && !errors.Is(err, middleware.ErrAlreadyTaken) {
					t.Errorf("dispatch: %v", err)
				}
				return err == nil
			}, waitFor, 50*time.Millisecond, "free again after maxLag")
			most, total := events.eventsPerEmail(t)
			require.Equal(t, 1, most)
			require.Equal(t, 1, total)
		})
	}
}

// Two nodes sweep at once: one sweeps a scope while the other skips it.
func TestSweepRunsOnOneNodeAtATimeOnPostgres(t *testing.T) {
	t.Parallel()
	nodes, events := newTwoReservingNodes(t, time.Hour)
	ctx := context.Background()
	_, err := bus.Dispatch[string](ctx, nodes[0].bus, &commands.CreateStaff{StaffID: "a", Email: "a@x.org", Name: "A"})
	require.NoError(t, err)

	held, err := nodes[0].locks.TryLock(ctx, lockstore.Key{Namespace: "uniqueness.sweep", ID: "staff.email"})
	require.NoError(t, err)
	res, err := nodes[1].mw.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"staff.email"}, res.Skipped, "node a sweeps: node b skips")
	require.NoError(t, held.Release(ctx))

	_, err = events.project(ctx)
	require.NoError(t, err)
	res, err = nodes[1].mw.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, uniqueness.SweepResult{Dropped: 1}, res)
}
