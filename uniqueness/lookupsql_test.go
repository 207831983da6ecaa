package uniqueness

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/commands"
	"github.com/claimbus/claimbus/internal/lockext"
	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/postgres"
)

// TestFieldSQLAnswersAlikeBothWays: a FieldSQL rule's lookup, written
// once, answers every value the same through the probe (in the lock's
// round trip on the PostgreSQL store) and through the Go path (on the
// pool), on the same table: taken, free, or an error on both.
func TestFieldSQLAnswersAlikeBothWays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t, pgtest.PoolConfig{MaxConns: 4})
	_, err := pool.Exec(ctx, `CREATE TABLE staff (id text PRIMARY KEY, email text UNIQUE, alias text);
		INSERT INTO staff VALUES ('1', 'ann@x.org', 'Ann'), ('2', 'bob@x.org', NULL), ('3', 'o''neil@x.org', 'ann@x.org')`)
	require.NoError(t, err)
	store, err := postgres.New(ctx, pool, postgres.Config{LockConns: 1})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, store.Close()) })

	lookups := []string{
		`SELECT email FROM staff WHERE email = ANY($1)`,
		`SELECT email FROM staff WHERE email = ANY($1) OR alias = ANY($1)`, // rows that name another value
		`SELECT lower(alias) FROM staff WHERE lower(alias) = ANY($1)`,
		`SELECT alias FROM staff WHERE email = ANY($1)`, // a NULL row: an error both ways
		`SELECT email FROM staff WHERE email = ANY($1) AND 1/(length(email) - 9) > 0`,
		`SELECT email FROM no_such_table WHERE email = ANY($1)`,
	}
	values := []string{"ann@x.org", "bob@x.org", "o'neil@x.org", "ann", "nobody@x.org", "", "ANN@X.ORG"}
	for i, sql := range lookups {
		r := FieldSQL(Names{Field: "email", Scope: "staff.email"}, func(s string) string { return s }, pool, sql)
		require.NoError(t, r.err)
		for j, v := range values {
			what := fmt.Sprintf("%s for %q", sql, v)
			goTaken, goErr := r.taken(ctx, v)
			key := lockstore.Key{Namespace: "alike", ID: fmt.Sprint(i, "-", j)}
			lk, probeTaken, probeErr := store.TryLockProbe(ctx, key, lockext.Probe{SQL: r.probe, Value: v})
			if probeErr == nil {
				require.NoError(t, lk.Release(ctx))
			}
			require.Equal(t, goErr != nil, probeErr != nil, "%s: errors: Go %v, probe %v", what, goErr, probeErr)
			require.Equal(t, goTaken, probeTaken, what)
		}
	}
	require.Equal(t, 0, int(store.Stats().Reconnects), "no probe ended the lock connection")
}

// TestTakenByWithoutALookupOfItsOwn: a command that ran no lookup of its
// own (it failed behind a claimant that found the value taken) learns who
// took the value from the rule's lookup, once; one whose lookup told it
// runs none. Both paths read the same two columns.
func TestTakenByWithoutALookupOfItsOwn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t, pgtest.PoolConfig{MaxConns: 2})
	_, err := pool.Exec(ctx, `CREATE TABLE staff (id text PRIMARY KEY, email text UNIQUE);
		INSERT INTO staff VALUES ('s1', 'ann@x.org')`)
	require.NoError(t, err)
	db := &queryCounter{pool: pool}
	r := FieldSQL(Names{Field: "email", Scope: "staff.email"}, func(c *commands.CreateStaff) string { return c.Email },
		db, `SELECT email, id FROM staff WHERE email = ANY($1)`,
		TakenBy(func(c *commands.CreateStaff) string { return c.StaffID }))
	require.NoError(t, r.err)

	for _, tc := range []struct {
		id   string
		done bool
	}{{"s1", true}, {"s2", false}, {"", false}} {
		tg := target{key: lockstore.Key{Namespace: "staff.email", ID: "ann@x.org"}, rule: &r}
		done, err := tg.done(ctx, &commands.CreateStaff{StaffID: tc.id})
		require.NoError(t, err)
		require.Equal(t, tc.done, done, "staff id %q", tc.id)
		require.True(t, tg.byKnown)
	}
	require.Equal(t, 3, db.n, "one lookup per command that ran none")

	tg := target{key: lockstore.Key{Namespace: "staff.email", ID: "ann@x.org"}, rule: &r, by: "s1", byKnown: true}
	done, err := tg.done(ctx, &commands.CreateStaff{StaffID: "s1"})
	require.NoError(t, err)
	require.True(t, done)
	require.Equal(t, 3, db.n, "no lookup when the command's own told who took the value")

	// A rule for a value type is given pointers to its commands too.
	vr := FieldSQL(Names{Field: "email", Scope: "staff.email"}, func(c commands.CreateStaff) string { return c.Email },
		db, `SELECT email, id FROM staff WHERE email = ANY($1)`,
		TakenBy(func(c commands.CreateStaff) string { return c.StaffID }))
	require.NoError(t, vr.err)
	tg = target{key: lockstore.Key{Namespace: "staff.email", ID: "ann@x.org"}, rule: &vr, by: "s1", byKnown: true}
	done, err = tg.done(ctx, &commands.CreateStaff{StaffID: "s1"})
	require.NoError(t, err)
	require.True(t, done, "a *CreateStaff for a rule of CreateStaff")
}

// queryCounter is a pool that counts its queries.
type queryCounter struct {
	pool *pgxpool.Pool
	n    int
}

func (q *queryCounter) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	q.n++
	return q.pool.Query(ctx, sql, args...)
}
