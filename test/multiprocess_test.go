package e2e

import (
	"context"
	"net/http"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/example_app/app"
	"github.com/claimbus/claimbus/internal/natstest"
	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/postgres"
)

// backstopLog is what a node logs when a unique index under the claims
// fires (app.Node.Backstops).
const backstopLog = "a unique index refused a row the claims should have kept out"

// pair is two example_app processes, nodes a and b, serving on one fresh
// database, with a pool on that database for the test's own queries and
// an HTTP client.
type pair struct {
	dsn  string
	a, b *process
	pool *pgxpool.Pool
	c    *http.Client
}

// startPair starts nodes a and b at once, each with its extra flags, and
// waits until both serve.
func startPair(t *testing.T, bin string, aFlags, bFlags []string) pair {
	t.Helper()
	dsn := pgtest.DSN(t)
	a := startProcess(t, bin, dsn, "a", aFlags...)
	b := startProcess(t, bin, dsn, "b", bFlags...)
	a.ready(t)
	b.ready(t)
	pool := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 4, ApplicationName: "observer"})
	return pair{dsn: dsn, a: a, b: b, pool: pool, c: newClient(t)}
}

// Nodes as separate processes of the example_app binary, on one database.
func TestProcesses(t *testing.T) {
	t.Parallel()
	bin := buildApp(t)

	// Two processes started at once (the schema is created by whichever
	// comes first) share one queue per command through PostgreSQL; a
	// storm of sign-ups over both creates one member per address; SIGTERM
	// stops each gracefully.
	t.Run("storm", func(t *testing.T) {
		t.Parallel()
		p := startPair(t, bin, []string{"-transport", "postgres"}, []string{"-transport", "postgres"})
		a, b, c := p.a, p.b, p.c
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()

		out := storm(ctx, c, []string{a.url, b.url}, signups("user", 20, 10), stormConfig{})
		requireOneRowPerEmail(t, p.pool, out, 20)

		// A node name is taken while its node lives.
		dup := startProcess(t, bin, p.dsn, "a", "-transport", "postgres")
		select {
		case <-dup.done:
		case <-time.After(deadline):
			t.Fatal("a second node named a keeps running")
		}
		require.Equal(t, 1, dup.cmd.ProcessState.ExitCode())
		require.Contains(t, dup.out.String(), `another live node is named \"a\"`)

		a.requireCleanExit(t)
		b.requireCleanExit(t)
		require.NotContains(t, a.out.String()+b.out.String(), backstopLog)
	})

	// Two processes with -transport nats share one queue per command in
	// NATS JetStream (an in-process server): a storm creates one member
	// per address. While the NATS server is down a sign-up is answered 503
	// unavailable, and once it is back (same port, same store) 201.
	t.Run("storm/nats", func(t *testing.T) {
		t.Parallel()
		srv := natstest.Start(t)
		flags := []string{"-transport", "nats", "-nats-url", srv.URL()}
		p := startPair(t, bin, flags, flags)
		a, b, c := p.a, p.b, p.c
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()

		out := storm(ctx, c, []string{a.url, b.url}, signups("user", 20, 10), stormConfig{})
		requireOneRowPerEmail(t, p.pool, out, 20)

		srv.Stop()
		down := post(ctx, c, a.url+"/staff", signup{StaffID: "down", Email: "down@example.org", Name: "Down"})
		require.NoError(t, down.Err)
		require.Equal(t, http.StatusServiceUnavailable, down.Status, "%v", down.Body)
		require.Equal(t, "unavailable", down.str("code"))
		srv.Start()
		var back answer
		eventually(t, func() bool {
			back = post(ctx, c, b.url+"/staff", signup{StaffID: "back", Email: "back@example.org", Name: "Back"})
			return back.Err == nil && back.Status != http.StatusServiceUnavailable
		}, "a sign-up after NATS is back")
		require.Equal(t, http.StatusCreated, back.Status, "%v", back.Body)

		a.requireCleanExit(t)
		b.requireCleanExit(t)
		require.NotContains(t, a.out.String()+b.out.String(), backstopLog)
	})

	// A node killed with SIGKILL while it holds a claim loses it with its
	// database sessions: the other node, which waited behind it, takes the
	// address.
	t.Run("kill while holding a claim", func(t *testing.T) {
		t.Parallel()
		const held = "held@example.org"
		p := startPair(t, bin, []string{"-test-hold-email", held}, nil)
		a, b, c, pool := p.a, p.b, p.c, p.pool
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()

		observer, err := postgres.New(ctx, pool, postgres.Config{Namespaces: app.Namespaces(), Node: "observer"})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, observer.Close()) })
		lid, err := observer.LockID(lockstore.Key{Namespace: app.NamespaceStaffEmail, ID: held})
		require.NoError(t, err)
		heldBy := func(node string) bool {
			holders, err := observer.Held(ctx)
			require.NoError(t, err)
			for _, h := range holders {
				if h.Key.Namespace == app.NamespaceStaffEmail && h.Key.ID == strconv.FormatInt(int64(lid.ID), 10) && h.Node == node {
					return true
				}
			}
			return false
		}

		// Node a claims the address and holds it (the test hook).
		aAnswer := make(chan answer, 1)
		go func() {
			aAnswer <- post(ctx, c, a.url+"/staff", signup{StaffID: "held-a", Email: held, Name: "Held A"})
		}()
		eventually(t, func() bool { return heldBy("a") }, "node a holds the claim on %s", held)

		// lastTry is when node b's lock connections (named b, as its pool
		// is) last began a round trip (their query tries or ends advisory
		// locks). Once b is up, the only lock it asks for is the claim on
		// the address, and it ends none while a holds that claim.
		lastTry := func() time.Time {
			var at time.Time
			require.NoError(t, pool.QueryRow(ctx, `SELECT coalesce(max(query_start), 'epoch') FROM pg_stat_activity
				WHERE application_name = 'b' AND query LIKE '%pg_try_advisory_lock%'`).Scan(&at))
			return at
		}

		// Node b wants the same address: it tries the claim again and
		// again, and cannot answer, while a holds it.
		before := lastTry()
		bAnswer := make(chan answer, 1)
		go func() {
			bAnswer <- post(ctx, c, b.url+"/staff", signup{StaffID: "held-b", Email: "Held@Example.org", Name: "Held B"})
		}()
		var firstTry time.Time
		eventually(t, func() bool {
			at := lastTry()
			if firstTry.IsZero() && at.After(before) {
				firstTry = at
			}
			return !firstTry.IsZero() && at.After(firstTry)
		}, "node b tries the claim on %s twice", held)
		require.True(t, heldBy("a"))
		select {
		case ans := <-bAnswer:
			t.Fatalf("node b answered while node a held the claim: %d %v", ans.Status, ans.Body)
		default:
		}

		st := a.stop(t, syscall.SIGKILL)
		require.Equal(t, syscall.SIGKILL, st.Sys().(syscall.WaitStatus).Signal(), "%v", st)
		require.Error(t, (<-aAnswer).Err, "node a died before answering")

		select {
		case ans := <-bAnswer:
			require.NoError(t, ans.Err)
			require.Equal(t, http.StatusCreated, ans.Status, "%v", ans.Body)
			require.Equal(t, "held-b", ans.str("staff_id"))
		case <-time.After(deadline):
			t.Fatal("node b did not get the address after node a died")
		}
		require.False(t, heldBy("a"))
		rows, n := staffRows(t, pool)
		require.Equal(t, 1, n)
		require.Equal(t, map[string]string{held: "held-b"}, rows)

		b.requireCleanExit(t)
		require.NotContains(t, b.out.String(), backstopLog)
	})

	// A node killed in the middle of a storm leaves no duplicate behind,
	// whether each node handles its own requests or both take commands
	// from one queue (where a command the dead node was handling is handed
	// to the other one).
	for _, transport := range []string{"inprocess", "postgres"} {
		t.Run("kill mid-storm/"+transport, func(t *testing.T) {
			t.Parallel()
			p := startPair(t, bin, []string{"-transport", transport}, []string{"-transport", transport})
			a, b, c := p.a, p.b, p.c
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()

			// Node a is killed once 60 of 200 sign-ups are answered; what
			// it did not answer is sent again to node b.
			ups := signups("user", 20, 10)
			out := storm(ctx, c, []string{a.url, b.url}, ups, stormConfig{
				workers: 16,
				afterN:  60,
				after:   func() { _ = a.cmd.Process.Kill() },
			})
			<-a.done
			created := map[string]string{}       // address -> staff id answered 201
			lost := map[string]map[string]bool{} // address -> staff ids whose answer was lost
			for i, o := range out {
				ans := o.answer
				retried := ans.Err != nil
				if retried {
					require.Equal(t, 0, o.node, "only node a's requests fail: %v", ans.Err)
					if lost[o.base] == nil {
						lost[o.base] = map[string]bool{}
					}
					lost[o.base][o.StaffID] = true
					ans = post(ctx, c, b.url+"/staff", ups[i])
					require.NoError(t, ans.Err)
				}
				switch ans.Status {
				case http.StatusCreated:
					require.NotContains(t, created, o.base, "two members created for %s", o.base)
					created[o.base] = o.StaffID
				case http.StatusConflict:
					require.Equal(t, "already_taken", ans.str("code"))
					require.Equal(t, "email", ans.str("field"))
				case http.StatusOK:
					// A replay: node a committed this very sign-up and died
					// before answering; sent again, it is answered with
					// what is stored (checked against the rows below).
					if retried {
						break
					}
					// Or, on the shared queue, a redelivery: node a ran a
					// command sent to node b, committed and died before
					// acking it; node b ran it again, found it done and
					// answered with the member as stored. It is the sign-up
					// that created the member.
					require.Equal(t, "postgres", transport, "a 200 for a sign-up sent once and handled by its own node: %s %v", o.StaffID, ans.Body)
					require.Equal(t, 1, o.node, "a 200 for a sign-up sent once to node a: %s %v", o.StaffID, ans.Body)
					require.Equal(t, o.StaffID, ans.str("staff_id"))
					require.NotContains(t, created, o.base, "two members created for %s", o.base)
					created[o.base] = o.StaffID
				default:
					t.Fatalf("sign-up %s: status %d %v", o.StaffID, ans.Status, ans.Body)
				}
			}
			require.NotEmpty(t, lost, "node a died in the middle of the storm")

			rows, n := staffRows(t, p.pool)
			require.Equal(t, 20, n, "one row per address")
			require.Len(t, rows, 20)
			for _, up := range ups[:20] {
				id, ok := rows[up.base]
				require.True(t, ok, "no member for %s", up.base)
				if want, ok := created[up.base]; ok {
					require.Equal(t, want, id, "the member of %s is the one a 201 answered", up.base)
				} else {
					// Node a committed it and died before answering: the
					// request sent again was already_taken, or a 200 replay.
					require.True(t, lost[up.base][id], "the member of %s (%s) comes from a request node a did not answer", up.base, id)
				}
			}

			b.requireCleanExit(t)
			require.NotContains(t, b.out.String(), backstopLog)
		})
	}
}
