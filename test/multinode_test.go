package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/bus/natstransport"
	"github.com/claimbus/claimbus/bus/sqltransport"
	"github.com/claimbus/claimbus/example_app/app"
	"github.com/claimbus/claimbus/internal/natstest"
	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/postgres"
)

// stack is one full node in this process: its own pool (named by
// application_name), PostgreSQL lock store, bus and HTTP server.
type stack struct {
	pool  *pgxpool.Pool
	store *postgres.Store
	node  *app.Node
	url   string
}

// natsServers are the in-process NATS servers of -transport "nats", by the
// dsn of the database whose nodes share one: the first such node of a
// database starts it, for the rest of its test.
var natsServers sync.Map // dsn → *natstest.Server

// natsFor returns the URL of the NATS server of the nodes on dsn, starting
// it for t on first use; it stops when t ends, after the nodes t started
// since.
func natsFor(t *testing.T, dsn string) string {
	if srv, ok := natsServers.Load(dsn); ok {
		return srv.(*natstest.Server).URL()
	}
	srv := natstest.Start(t)
	natsServers.Store(dsn, srv)
	t.Cleanup(func() { natsServers.Delete(dsn) })
	return srv.URL()
}

// newStack starts a node on the database dsn names, with commands in
// process, through bus/sqltransport ("postgres") or through
// bus/natstransport on an in-process NATS server shared by the nodes of
// the database ("nats"; claims and locks stay in PostgreSQL). Everything
// closes when the test ends: the HTTP server, then the bus, the transport,
// the store, the pools.
func newStack(t *testing.T, dsn, name, transport string) *stack {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	pool := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 20, ApplicationName: name})
	store, err := postgres.New(ctx, pool, postgres.Config{Namespaces: app.Namespaces(), Node: name})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, store.Close()) })

	var bcfg bus.Config
	if transport == "postgres" {
		tpool := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 16, ApplicationName: name + "-bus"})
		tr, err := sqltransport.New(ctx, tpool, sqltransport.Config{NodeID: name})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, tr.Close()) })
		bcfg = tr.BusConfig(bus.Config{})
	}
	if transport == "nats" {
		tr, err := natstransport.New(ctx, natsFor(t, dsn), natstransport.Config{NodeID: name})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, tr.Close()) })
		bcfg = tr.BusConfig(bus.Config{})
	}
	node, err := app.New(ctx, app.Config{Backend: app.PostgresBackend(store), Name: name, Bus: bcfg})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, node.Close()) })
	srv := httptest.NewServer(node.Handler())
	t.Cleanup(srv.Close)
	return &stack{pool: pool, store: store, node: node, url: srv.URL}
}

// Two nodes in one process, each with its own pool, lock store and bus,
// share one database: 200 sign-ups of 20 addresses spread over both create
// exactly 20 members, and the other 180 are already_taken, whether each node
// handles its own requests or both take commands from one queue (in the
// database, or in NATS JetStream).
func TestMultiNodeSignUpStorm(t *testing.T) {
	t.Parallel()
	for _, transport := range []string{"inprocess", "postgres", "nats"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			dsn := pgtest.DSN(t)
			a := newStack(t, dsn, "a", transport)
			b := newStack(t, dsn, "b", transport)
			c := newClient(t)
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()

			out := storm(ctx, c, []string{a.url, b.url}, signups("user", 20, 10), stormConfig{})
			requireOneRowPerEmail(t, a.pool, out, 20)
			require.Zero(t, a.node.Backstops()+b.node.Backstops(), "the unique index never fired")
		})
	}
}

// Three nodes whose commands go through NATS JetStream, their claims and
// rows in one PostgreSQL: 600 sign-ups of 60 addresses, all at once and
// spread over the nodes, create exactly one member per address; every
// other sign-up is 409 already_taken, none is a 5xx, and the unique index
// never fires.
func TestThreeNodeSignUpStormOverNATS(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	nodes := []*stack{newStack(t, dsn, "a", "nats"), newStack(t, dsn, "b", "nats"), newStack(t, dsn, "c", "nats")}
	c := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()

	urls := []string{nodes[0].url, nodes[1].url, nodes[2].url}
	out := storm(ctx, c, urls, signups("nats", 60, 10), stormConfig{})
	requireOneRowPerEmail(t, nodes[0].pool, out, 60)
	var backstops int64
	for _, n := range nodes {
		backstops += n.node.Backstops()
	}
	require.Zero(t, backstops, "the unique index never fired")
}

// Locks and Serialize hold across nodes: a transfer locked on one node is
// locked for the other; an approve on one node racing a cancel on the other
// decides each transfer once; approvals racing on one wallet never
// overdraw it; guesses on both nodes find one winner per word.
func TestMultiNodeTransfersAndLobby(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	a := newStack(t, dsn, "a", "inprocess")
	b := newStack(t, dsn, "b", "inprocess")
	nodes := []*stack{a, b}
	c := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()

	for _, w := range []app.Wallet{
		{WalletID: "alice", Currency: "EUR", Balance: 1000_00},
		{WalletID: "bob", Currency: "EUR", Balance: 0},
		{WalletID: "carol", Currency: "EUR", Balance: 100_00},
		{WalletID: "dave", Currency: "EUR", Balance: 0},
	} {
		require.Equal(t, http.StatusCreated, post(ctx, c, a.url+"/wallets", w).Status)
	}
	openTransfer := func(s *stack, id, from, to string, amount int64) {
		t.Helper()
		ans := post(ctx, c, s.url+"/transfers", map[string]any{
			"transfer_id": id, "from_wallet_id": from, "to_wallet_id": to, "amount": amount, "currency": "EUR",
		})
		require.NoError(t, ans.Err)
		require.Equal(t, http.StatusCreated, ans.Status, "%v", ans.Body)
	}

	t.Run("a lock taken on one node", func(t *testing.T) {
		openTransfer(a, "t-held", "alice", "bob", 1_00)
		l, err := a.store.TryLock(ctx, lockstore.Key{Namespace: app.NamespaceTransfer, ID: "t-held"})
		require.NoError(t, err)
		ans := post(ctx, c, b.url+"/transfers/t-held/approve", nil)
		require.Equal(t, http.StatusLocked, ans.Status, "%v", ans.Body)
		require.Equal(t, "locked", ans.str("code"))
		require.NoError(t, l.Release(ctx))
		ans = post(ctx, c, b.url+"/transfers/t-held/approve", nil)
		require.Equal(t, http.StatusOK, ans.Status, "%v", ans.Body)
		require.Equal(t, "approved", ans.str("state"))
	})

	t.Run("approve and cancel on two nodes", func(t *testing.T) {
		const n = 20
		for i := range n {
			openTransfer(nodes[i%2], fmt.Sprintf("t-race-%d", i), "alice", "bob", 10_00)
		}
		type pair struct{ approve, cancel answer }
		pairs := make([]pair, n)
		var wg sync.WaitGroup
		for i := range n {
			id := fmt.Sprintf("t-race-%d", i)
			wg.Go(func() { pairs[i].approve = post(ctx, c, nodes[i%2].url+"/transfers/"+id+"/approve", nil) })
			wg.Go(func() { pairs[i].cancel = post(ctx, c, nodes[(i+1)%2].url+"/transfers/"+id+"/cancel", nil) })
		}
		wg.Wait()
		approved := 0
		for i, p := range pairs {
			require.NoError(t, p.approve.Err)
			require.NoError(t, p.cancel.Err)
			var winner, loser answer
			switch {
			case p.approve.Status == http.StatusOK:
				winner, loser = p.approve, p.cancel
				approved++
			case p.cancel.Status == http.StatusOK:
				winner, loser = p.cancel, p.approve
			default:
				t.Fatalf("t-race-%d: neither won: approve %d %v, cancel %d %v", i, p.approve.Status, p.approve.Body, p.cancel.Status, p.cancel.Body)
			}
			// The loser ran into the winner's lock, or came after it.
			require.Contains(t, []string{"locked", "not_open"}, loser.str("code"), "t-race-%d: %v", i, loser.Body)
			stored := get(ctx, c, a.url+fmt.Sprintf("/transfers/t-race-%d", i))
			require.Equal(t, winner.str("state"), stored.str("state"))
		}
		alice := get(ctx, c, b.url+"/wallets/alice").Body["balance"].(float64)
		bob := get(ctx, c, b.url+"/wallets/bob").Body["balance"].(float64)
		require.Equal(t, float64(1_00+approved*10_00), bob)
		require.Equal(t, float64(1000_00), alice+bob, "money is neither made nor lost")
	})

	t.Run("approvals racing on one wallet", func(t *testing.T) {
		const n = 20
		for i := range n {
			openTransfer(a, fmt.Sprintf("t-carol-%d", i), "carol", "dave", 30_00)
		}
		answers := make([]answer, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { answers[i] = post(ctx, c, nodes[i%2].url+fmt.Sprintf("/transfers/t-carol-%d/approve", i), nil) })
		}
		wg.Wait()
		approved, refused := 0, 0
		for _, ans := range answers {
			require.NoError(t, ans.Err)
			switch ans.Status {
			case http.StatusOK:
				approved++
			case http.StatusUnprocessableEntity:
				require.Equal(t, app.CodeInsufficientFunds, ans.str("code"))
				refused++
			default:
				t.Fatalf("status %d %v", ans.Status, ans.Body)
			}
		}
		require.Equal(t, 3, approved, "100.00 covers three transfers of 30.00")
		require.Equal(t, n-3, refused)
		require.Equal(t, float64(10_00), get(ctx, c, a.url+"/wallets/carol").Body["balance"])
		require.Equal(t, float64(90_00), get(ctx, c, b.url+"/wallets/dave").Body["balance"])
	})

	t.Run("guesses on two nodes", func(t *testing.T) {
		words := []string{"apple", "river", "stone", "cloud", "maple"}
		ans := post(ctx, c, b.url+"/lobbies", map[string]any{"lobby_id": "l-1", "words": words})
		require.Equal(t, http.StatusCreated, ans.Status, "%v", ans.Body)
		var guesses []string
		for range 15 {
			guesses = append(guesses, words...)
		}
		for range 5 {
			guesses = append(guesses, "pear", "lake", "rock", "plum", "sand")
		}
		answers := make([]answer, len(guesses))
		var wg sync.WaitGroup
		for i, g := range guesses {
			wg.Go(func() { answers[i] = post(ctx, c, nodes[i%2].url+"/lobbies/l-1/guesses", map[string]string{"word": g}) })
		}
		wg.Wait()
		winners := map[string]int{}
		wrong := 0
		for i, ans := range answers {
			require.NoError(t, ans.Err)
			require.Equal(t, http.StatusOK, ans.Status, "%v", ans.Body)
			switch {
			case ans.Body["won"] == true:
				winners[guesses[i]]++
			case ans.Body["correct"] == false:
				wrong++
			}
		}
		require.Equal(t, map[string]int{"apple": 1, "river": 1, "stone": 1, "cloud": 1, "maple": 1}, winners)
		require.Equal(t, 25, wrong)
		var wins, left int
		require.NoError(t, a.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM lobby_win WHERE lobby_id = 'l-1'),
			(SELECT words_left FROM lobby WHERE lobby_id = 'l-1')`).Scan(&wins, &left))
		require.Equal(t, 5, wins)
		require.Zero(t, left)
	})

	require.Zero(t, a.node.Backstops()+b.node.Backstops(), "the unique indexes never fired")
}

// Nodes that start at once create the schema once, without an error: the
// DDL runs under an advisory lock.
func TestConcurrentSchemaCreation(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	const n = 8
	backends := make([]app.Backend, n)
	for i := range n {
		pool := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: fmt.Sprintf("n%d", i)})
		store, err := postgres.New(ctx, pool, postgres.Config{Namespaces: app.Namespaces(), LockConns: 1})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, store.Close()) })
		backends[i] = app.PostgresBackend(store)
	}
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = app.Migrate(ctx, backends[i])
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "node %d", i)
	}
	var tables int
	require.NoError(t, pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 1}).QueryRow(ctx,
		`SELECT count(*) FROM pg_tables WHERE schemaname = 'public'
		 AND tablename IN ('staff', 'wallet', 'transfer', 'lobby', 'lobby_word', 'lobby_win')`).Scan(&tables))
	require.Equal(t, 6, tables)
}
