package txcommand_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	cspostgres "github.com/claimbus/claimbus/claimstore/postgres"
	cssqlite "github.com/claimbus/claimbus/claimstore/sqlite"
	"github.com/claimbus/claimbus/commands"
	"github.com/claimbus/claimbus/idempotency"
	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/postgres"
	locksqlite "github.com/claimbus/claimbus/lockstore/sqlite"
	"github.com/claimbus/claimbus/middleware"
	"github.com/claimbus/claimbus/txcommand"
	"github.com/claimbus/claimbus/uniqueness"
)

func TestMain(m *testing.M) {
	if os.Getenv(childStep) != "" {
		os.Exit(crashChild())
	}
	pgtest.Main(m)
}

// schema is an event-sourced staff model: the handler appends to
// staff_events, which has no unique index; staff_read is its read model,
// which the tests project by hand (or never, to stand for a projection
// that stalls).
const schema = `CREATE TABLE staff_events (
	seq   bigserial PRIMARY KEY,
	id    text NOT NULL,
	email text NOT NULL);
CREATE TABLE staff_read (id text PRIMARY KEY, email text NOT NULL UNIQUE);
CREATE TABLE outbox (id text PRIMARY KEY, payload text NOT NULL);`

// sqliteSchema is schema on SQLite.
const sqliteSchema = `CREATE TABLE staff_events (
	seq   INTEGER PRIMARY KEY AUTOINCREMENT,
	id    TEXT NOT NULL,
	email TEXT NOT NULL);
CREATE TABLE staff_read (id TEXT PRIMARY KEY, email TEXT NOT NULL UNIQUE);
CREATE TABLE outbox (id TEXT PRIMARY KEY, payload TEXT NOT NULL);`

// The backends the shared tests run on.
const (
	onPostgres = "postgres"
	onSQLite   = "sqlite"
)

// eachBackend runs test on PostgreSQL, then on SQLite.
func eachBackend(t *testing.T, test func(t *testing.T, d *testDB)) {
	for _, kind := range []string{onPostgres, onSQLite} {
		t.Run(kind, func(t *testing.T) { test(t, newTestDB(t, kind)) })
	}
}

// testDB is a fresh database with the schema: on PostgreSQL (dsn), or a
// SQLite file (path, db) whose one lock store its first node makes.
type testDB struct {
	kind   string
	dsn    string
	path   string
	db     *sql.DB
	locks  *locksqlite.Store
	claims *cssqlite.Store
}

func newTestDB(t testing.TB, kind string) *testDB {
	if kind == onPostgres {
		return &testDB{kind: kind, dsn: newDB(t)}
	}
	path := filepath.Join(t.TempDir(), "app.db")
	db := openSQLite(t, path)
	_, err := db.Exec(sqliteSchema)
	require.NoError(t, err)
	return &testDB{kind: kind, path: path, db: db}
}

// openSQLite opens the database file at path, closed when t ends.
func openSQLite(t testing.TB, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", locksqlite.DSN(path, 5*time.Second)+"&_synchronous=NORMAL")
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	return db
}

// node returns a node whose middleware is configured by cfg (Backend
// filled in). On SQLite every node of the file shares its one store: the
// nodes of a test stand for the goroutines of one process.
func (d *testDB) node(t testing.TB, name string, cfg txcommand.Config) *env {
	t.Helper()
	if d.kind == onPostgres {
		return newNode(t, d.dsn, name, cfg)
	}
	if d.locks == nil {
		var err error
		d.locks, err = locksqlite.New(context.Background(), d.db, locksqlite.Config{})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, d.locks.Close()) })
		d.claims, err = cssqlite.New(context.Background(), d.db, cssqlite.Config{})
		require.NoError(t, err)
	}
	cfg.Backend = txcommand.SQLite(d.locks, d.claims)
	return newEnv(t, &env{kind: onSQLite, db: d.db, llocks: d.locks}, cfg)
}

// env is one node: its database handle (pool or db), stores and runner.
type env struct {
	kind    string
	pool    *pgxpool.Pool     // on PostgreSQL
	locks   *postgres.Store   // on PostgreSQL
	db      *sql.DB           // on SQLite
	llocks  *locksqlite.Store // on SQLite
	backend txcommand.Backend
	runner  *middleware.Runner
}

// newDB returns a fresh PostgreSQL database with the schema.
func newDB(t testing.TB) string {
	t.Helper()
	dsn := pgtest.DSN(t)
	pool := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "setup"})
	_, err := pool.Exec(context.Background(), schema)
	require.NoError(t, err)
	return dsn
}

// newNode returns a node on PostgreSQL at dsn whose middleware is
// configured by cfg (Backend filled in).
func newNode(t testing.TB, dsn, name string, cfg txcommand.Config) *env {
	t.Helper()
	return newNodeWith(t, dsn, name, cfg, 0)
}

// newNodeWith is newNode with the lock store's StatementTimeout (0: its
// default), which bounds how long the server keeps a silent node's
// transaction.
func newNodeWith(t testing.TB, dsn, name string, cfg txcommand.Config, statementTimeout time.Duration) *env {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 8, ApplicationName: name})
	locks, err := postgres.New(ctx, pool, postgres.Config{StatementTimeout: statementTimeout})
	require.NoError(t, err)
	t.Cleanup(func() { _ = locks.Close() })
	claims, err := cspostgres.New(ctx, pool, cspostgres.Config{})
	require.NoError(t, err)
	cfg.Backend = txcommand.Postgres(locks, claims)
	return newEnv(t, &env{kind: onPostgres, pool: pool, locks: locks}, cfg)
}

// newEnv completes e with the middleware of cfg and its runner.
func newEnv(t testing.TB, e *env, cfg txcommand.Config) *env {
	t.Helper()
	m, err := txcommand.New(cfg)
	require.NoError(t, err)
	r, err := middleware.NewRunner(middleware.RunnerConfig{Middleware: []middleware.Middleware{m}})
	require.NoError(t, err)
	e.backend, e.runner = cfg.Backend, r
	return e
}

// exec runs a statement on e's database, outside any transaction.
func (e *env) exec(t testing.TB, q string, args ...any) {
	t.Helper()
	var err error
	if e.kind == onPostgres {
		_, err = e.pool.Exec(context.Background(), q, args...)
	} else {
		_, err = e.db.Exec(q, args...)
	}
	require.NoError(t, err)
}

// count runs a query of one integer on e's database.
func (e *env) count(t testing.TB, q string, args ...any) int {
	t.Helper()
	var n int
	if e.kind == onPostgres {
		require.NoError(t, e.pool.QueryRow(context.Background(), q, args...).Scan(&n))
	} else {
		require.NoError(t, e.db.QueryRow(q, args...).Scan(&n))
	}
	return n
}

// claimTables are the reservation and outcome tables of e's backend.
func (e *env) claimTables() (reservations, outcomes string) {
	if e.kind == onPostgres {
		return "claimbus.claim_reservation", "claimbus.claim_outcome"
	}
	return "claimbus_reservation", "claimbus_outcome"
}

// waiters returns how many commands wait for key's lock.
func (e *env) waiters(t testing.TB, key lockstore.Key) int {
	if e.kind == onPostgres {
		return e.count(t, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
	}
	return e.llocks.Waiting(key)
}

// held returns how many locks are held.
func (e *env) held(t testing.TB) int {
	if e.kind == onPostgres {
		// pg_locks shows the whole server's: this database's only.
		return e.count(t, "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database WHERE l.locktype = 'advisory' AND d.datname = current_database()")
	}
	held, err := e.llocks.Held(context.Background())
	require.NoError(t, err)
	return len(held)
}

// serialize runs fn in Serialize of e's lock store on key, with ctx.
func (e *env) serialize(ctx context.Context, key lockstore.Key, fn func(ctx context.Context) error) error {
	if e.kind == onPostgres {
		return e.locks.Serialize(ctx, key, func(ctx context.Context, _ pgx.Tx) error { return fn(ctx) })
	}
	return e.llocks.Serialize(ctx, key, func(ctx context.Context, _ *sql.Tx) error { return fn(ctx) })
}

// txExec runs a statement in the transaction ctx carries, on either
// backend.
func txExec(ctx context.Context, q string, args ...any) error {
	if tx, ok := postgres.TxFrom(ctx); ok {
		_, err := tx.Exec(ctx, q, args...)
		return err
	}
	if tx, ok := locksqlite.TxFrom(ctx); ok {
		_, err := tx.ExecContext(ctx, q, args...)
		return err
	}
	return errors.New("no transaction in the handler's ctx")
}

// txCount runs a query of one integer in the transaction ctx carries.
func txCount(ctx context.Context, q string, args ...any) (int, error) {
	var n int
	if tx, ok := postgres.TxFrom(ctx); ok {
		return n, tx.QueryRow(ctx, q, args...).Scan(&n)
	}
	if tx, ok := locksqlite.TxFrom(ctx); ok {
		return n, tx.QueryRowContext(ctx, q, args...).Scan(&n)
	}
	return 0, errors.New("no transaction in the handler's ctx")
}

// emailRule is CreateStaff's email, unique, looked up in the read model
// and reserved until it shows there.
var emailRule = txcommand.Unique(uniqueness.Names{Field: "email", Scope: "staff.email"},
	func(c *commands.CreateStaff) string { return c.Email },
	"SELECT 1 FROM staff_read WHERE email = $1",
	txcommand.Normalize(uniqueness.NormalizeEmail), txcommand.Reserve())

// fullConfig has the email rule and idempotency by command id.
func fullConfig() txcommand.Config {
	return txcommand.Config{
		Rules:       []txcommand.Rule{emailRule},
		Idempotency: &txcommand.Idempotency{Key: idempotency.CommandUUID, Retention: time.Hour},
	}
}

// register is the handler: it appends StaffRegistered in the command's
// transaction, writes an outbox row with it, and returns the staff id.
func register(ctx context.Context, p *middleware.Pipeline) (any, error) {
	c := p.Command.(*commands.CreateStaff)
	if err := txExec(ctx, "INSERT INTO staff_events (id, email) VALUES ($1, $2)", c.StaffID, uniqueness.NormalizeEmail(c.Email)); err != nil {
		return nil, err
	}
	if err := txExec(ctx, "INSERT INTO outbox (id, payload) VALUES ($1, $2)", c.StaffID, "StaffRegistered"); err != nil {
		return nil, err
	}
	return c.StaffID, nil
}

// send runs one CreateStaff with id as its command id.
func (e *env) send(ctx context.Context, id, email string, h middleware.HandlerFunc) (any, error) {
	p := middleware.NewPipeline(ctx, &commands.CreateStaff{StaffID: "staff-" + id, Email: email, Name: "N"})
	p.CommandName, p.CommandUUID = "commands.CreateStaff", id
	return e.runner.Run(ctx, p, h)
}

// counts returns the rows of staff_events, of the reservations, of the
// outcomes and of outbox.
func counts(t testing.TB, e *env) (events, reservations, outcomes, outbox int) {
	t.Helper()
	rs, oc := e.claimTables()
	events = e.count(t, "SELECT count(*) FROM staff_events")
	reservations = e.count(t, "SELECT count(*) FROM "+rs)
	outcomes = e.count(t, "SELECT count(*) FROM "+oc)
	outbox = e.count(t, "SELECT count(*) FROM outbox")
	return events, reservations, outcomes, outbox
}

func TestConfigValidate(t *testing.T) {
	require.ErrorContains(t, txcommand.Config{}.Validate(), "Config.Backend is nil")
	require.ErrorContains(t, txcommand.Config{}.Validate(), "neither Config.Rules nor Config.Idempotency")
	bad := txcommand.Unique(uniqueness.Names{Field: "", Scope: ""}, (func(*commands.CreateStaff) string)(nil), "")
	err := txcommand.Config{Rules: []txcommand.Rule{bad, {}}}.Validate()
	for _, want := range []string{"empty field name", "not a valid lock namespace", "nil value function", "empty lookup SQL", "zero Rule"} {
		require.ErrorContains(t, err, want)
	}
	for _, b := range []txcommand.Backend{txcommand.Postgres(nil, nil), txcommand.SQLite(nil, nil)} {
		err = txcommand.Config{Backend: b, Rules: []txcommand.Rule{emailRule, emailRule}, Idempotency: &txcommand.Idempotency{}}.Validate()
		for _, want := range []string{"a second rule", "lock store is nil", "claim store is nil", "Idempotency.Key is nil", "Retention is 0s"} {
			require.ErrorContains(t, err, want)
		}
	}
}

func TestCommitsTogetherAndAnswersRepeats(t *testing.T) {
	eachBackend(t, testCommitsTogetherAndAnswersRepeats)
}

func testCommitsTogetherAndAnswersRepeats(t *testing.T, d *testDB) {
	e := d.node(t, "node-a", fullConfig())
	ctx := context.Background()

	res, err := e.send(ctx, "c1", " Ann@X.org", register)
	require.NoError(t, err)
	require.Equal(t, "staff-c1", res)
	ev, rs, oc, ob := counts(t, e)
	require.Equal(t, [4]int{1, 1, 1, 1}, [4]int{ev, rs, oc, ob}, "the event, the reservation, the outcome and the outbox row commit together")

	// A repeat of the key gets the committed outcome; its handler does not run.
	res, err = e.send(ctx, "c1", " Ann@X.org", func(context.Context, *middleware.Pipeline) (any, error) {
		t.Fatal("the handler of a repeat ran")
		return nil, nil
	})
	require.NoError(t, err)
	require.JSONEq(t, `"staff-c1"`, string(res.(json.RawMessage)))

	// Another command for the same email, while the read model has not
	// caught up, is refused by the reservation.
	_, err = e.send(ctx, "c2", "ann@x.org", register)
	require.ErrorIs(t, err, middleware.ErrAlreadyTaken)
	var rej *middleware.Rejection
	require.ErrorAs(t, err, &rej)
	require.Equal(t, "email", rej.Field)

	// Once the read model shows it and the reservation is dropped, the
	// lookup refuses it.
	e.exec(t, "INSERT INTO staff_read SELECT id, email FROM staff_events")
	swept, err := mustNew(t, e).Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, uniqueness.SweepResult{Dropped: 1}, swept, "the read model shows the email: its reservation goes")
	_, err = e.send(ctx, "c3", "ann@x.org", register)
	require.ErrorIs(t, err, middleware.ErrAlreadyTaken)

	// The final rejections are stored too: c2's repeat gets them without a lookup.
	_, err = e.send(ctx, "c2", "ann@x.org", func(context.Context, *middleware.Pipeline) (any, error) {
		t.Fatal("the handler of a repeat ran")
		return nil, nil
	})
	require.ErrorIs(t, err, middleware.ErrAlreadyTaken)
}

func TestFailuresLeaveNothing(t *testing.T) { eachBackend(t, testFailuresLeaveNothing) }

func testFailuresLeaveNothing(t *testing.T, d *testDB) {
	e := d.node(t, "node-a", fullConfig())
	ctx := context.Background()
	writeThen := func(after func() (any, error)) middleware.HandlerFunc {
		return func(ctx context.Context, p *middleware.Pipeline) (any, error) {
			if _, err := register(ctx, p); err != nil {
				return nil, err
			}
			return after()
		}
	}
	for i, tt := range []struct {
		name     string
		h        middleware.HandlerFunc
		check    func(t *testing.T, err error)
		outcomes int
	}{
		{"an error", writeThen(func() (any, error) { return nil, errors.New("boom") }),
			func(t *testing.T, err error) { require.EqualError(t, err, "boom") }, 0},
		{"a panic", writeThen(func() (any, error) { panic("boom") }),
			func(t *testing.T, err error) {
				var perr *middleware.PanicError
				require.ErrorAs(t, err, &perr)
			}, 0},
		{"a transient rejection", writeThen(func() (any, error) { return nil, middleware.ErrUnavailable }),
			func(t *testing.T, err error) { require.ErrorIs(t, err, middleware.ErrUnavailable) }, 0},
		{"a final rejection (its outcome alone is stored)", writeThen(func() (any, error) {
			return nil, middleware.Reject(middleware.CodeInvalid, "name", "no")
		}), func(t *testing.T, err error) { require.ErrorIs(t, err, middleware.ErrInvalid) }, 1},
		{"a result that cannot be stored", writeThen(func() (any, error) { return func() {}, nil }),
			func(t *testing.T, err error) { require.ErrorIs(t, err, middleware.ErrNotApplied) }, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.send(ctx, fmt.Sprintf("f%d", i), fmt.Sprintf("f%d@x.org", i), tt.h)
			tt.check(t, err)
			// tt.outcomes counts the outcomes of this and the earlier cases.
			ev, rs, oc, ob := counts(t, e)
			require.Equal(t, [4]int{0, 0, tt.outcomes, 0}, [4]int{ev, rs, oc, ob})
		})
	}

	// A halt by a later hook rolls back too.
	halting := middleware.Hooks{OnBeforeDispatch: func(_ context.Context, p *middleware.Pipeline) {
		p.Halt(middleware.Reject(middleware.CodeLocked, "", "halted"))
	}}
	m, err := txcommand.New(txcommand.Config{Backend: e.backend, Rules: []txcommand.Rule{emailRule}})
	require.NoError(t, err)
	r, err := middleware.NewRunner(middleware.RunnerConfig{Middleware: []middleware.Middleware{m, halting}})
	require.NoError(t, err)
	p := middleware.NewPipeline(ctx, &commands.CreateStaff{StaffID: "s-h", Email: "h@x.org"})
	p.CommandUUID = "h"
	_, err = r.Run(ctx, p, register)
	require.ErrorIs(t, err, middleware.ErrLocked)
	ev, rs, _, ob := counts(t, e)
	require.Equal(t, [3]int{0, 0, 0}, [3]int{ev, rs, ob})
	require.Zero(t, e.held(t), "no lock is left held")
}

// TestOneWinnerPerEmail sends many commands for few emails from many
// goroutines on two nodes (one process on SQLite), with the read model
// never caught up (a projection stalled for the whole test): one event per
// email, the others already_taken, nothing else.
func TestOneWinnerPerEmail(t *testing.T) { eachBackend(t, testOneWinnerPerEmail) }

func testOneWinnerPerEmail(t *testing.T, d *testDB) {
	nodes := []*env{d.node(t, "node-a", fullConfig()), d.node(t, "node-b", fullConfig())}
	const emails, perEmail = 8, 12
	var wg sync.WaitGroup
	var ok, taken atomic.Int64
	errs := make(chan error, emails*perEmail)
	for i := range emails * perEmail {
		wg.Go(func() {
			_, err := nodes[i%2].send(context.Background(), uuid.NewString(), fmt.Sprintf("e%d@x.org", i%emails), register)
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, middleware.ErrAlreadyTaken):
				taken.Add(1)
			default:
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	require.EqualValues(t, emails, ok.Load())
	require.EqualValues(t, emails*(perEmail-1), taken.Load())
	require.Zero(t, nodes[0].count(t, "SELECT count(*) FROM (SELECT email FROM staff_events GROUP BY email HAVING count(*) > 1) d"))
}

// TestWaiterSeesTheHoldersOutcome: a waiter behind a holder that commits
// gets already_taken from its own lookup; behind one that rolls back, it
// runs.
func TestWaiterSeesTheHoldersOutcome(t *testing.T) { eachBackend(t, testWaiterSeesTheHoldersOutcome) }

func testWaiterSeesTheHoldersOutcome(t *testing.T, d *testDB) {
	cfg := txcommand.Config{Rules: []txcommand.Rule{txcommand.Unique(uniqueness.Names{Field: "email", Scope: "staff.email"},
		func(c *commands.CreateStaff) string { return c.Email }, "SELECT 1 FROM staff_events WHERE email = $1")}}
	a, b := d.node(t, "node-a", cfg), d.node(t, "node-b", cfg)
	ctx := context.Background()
	for _, commit := range []bool{true, false} {
		t.Run(fmt.Sprintf("holder commits %v", commit), func(t *testing.T) {
			email := fmt.Sprintf("w-%v@x.org", commit)
			holding, release := make(chan struct{}), make(chan struct{})
			done := make(chan error, 1)
			go func() {
				_, err := a.send(ctx, uuid.NewString(), email, func(ctx context.Context, p *middleware.Pipeline) (any, error) {
					if _, err := register(ctx, p); err != nil {
						return nil, err
					}
					close(holding)
					<-release
					if !commit {
						return nil, errors.New("rolled back")
					}
					return "ok", nil
				})
				done <- err
			}()
			<-holding
			waiter := make(chan error, 1)
			go func() {
				_, err := b.send(ctx, uuid.NewString(), email, register)
				waiter <- err
			}()
			// The waiter waits for the holder's lock.
			require.Eventually(t, func() bool {
				return a.waiters(t, lockstore.Key{Namespace: "staff.email", ID: email}) == 1
			}, 10*time.Second, 5*time.Millisecond)
			close(release)
			if commit {
				require.NoError(t, <-done)
				require.ErrorIs(t, <-waiter, middleware.ErrAlreadyTaken)
			} else {
				require.EqualError(t, <-done, "rolled back")
				require.NoError(t, <-waiter)
			}
		})
	}
}

// TestCommitFailureIsTheCommandsError: the commit failing (a reservation
// the primary key refuses: a row the handler wrote beside the middleware)
// fails the command with not_applied, and nothing of it commits.
func TestCommitFailureIsTheCommandsError(t *testing.T) {
	eachBackend(t, testCommitFailureIsTheCommandsError)
}

func testCommitFailureIsTheCommandsError(t *testing.T, d *testDB) {
	e := d.node(t, "node-a", fullConfig())
	ctx := context.Background()
	rs, _ := e.claimTables()
	now := map[string]string{onPostgres: "now()", onSQLite: "0"}[d.kind]
	_, err := e.send(ctx, "c1", "k@x.org", func(ctx context.Context, p *middleware.Pipeline) (any, error) {
		// The reservation the commit will insert.
		if err := txExec(ctx, "INSERT INTO "+rs+" VALUES ('staff.email', 'k@x.org', 'other', true, "+now+")"); err != nil {
			return nil, err
		}
		return "ok", txExec(ctx, "INSERT INTO staff_events (id, email) VALUES ('s', 'k@x.org')")
	})
	require.ErrorIs(t, err, middleware.ErrNotApplied)
	require.Equal(t, 503, middleware.HTTPStatus(err))
	ev, rs2, oc, _ := counts(t, e)
	require.Equal(t, [3]int{0, 0, 0}, [3]int{ev, rs2, oc})
}

// TestClaimTimeout: a command whose lock stays held past ClaimTimeout is
// refused with timeout, apart from its own request's deadline, whether it
// waits for its node's turn or, behind another node, at the server.
func TestClaimTimeout(t *testing.T) { eachBackend(t, testClaimTimeout) }

func testClaimTimeout(t *testing.T, d *testDB) {
	cfg := fullConfig()
	cfg.ClaimTimeout = 300 * time.Millisecond
	a, b := d.node(t, "node-a", cfg), d.node(t, "node-b", cfg)
	ctx := context.Background()
	for _, waiter := range []*env{a, b} {
		holding, release := make(chan struct{}), make(chan struct{})
		t.Cleanup(sync.OnceFunc(func() { close(release) }))
		done := make(chan error, 1)
		email := uuid.NewString() + "@x.org"
		go func() {
			_, err := a.send(ctx, uuid.NewString(), email, func(ctx context.Context, p *middleware.Pipeline) (any, error) {
				close(holding)
				<-release
				return register(ctx, p)
			})
			done <- err
		}()
		<-holding
		start := time.Now()
		_, err := waiter.send(ctx, uuid.NewString(), email, register)
		require.ErrorIs(t, err, middleware.ErrTimeout)
		require.NotErrorIs(t, err, context.DeadlineExceeded, "the claim's wait, not the request's deadline")
		require.Less(t, time.Since(start), 5*time.Second, "the server's lock_timeout ended the wait")
		release <- struct{}{}
		require.NoError(t, <-done)
	}
}

// TestNestedSerializeAndAfterCommit: the handler's ctx carries the
// transaction to the lock store's Serialize, which nests in it, and
// lockstore.AfterCommit runs only once the command committed.
func TestNestedSerializeAndAfterCommit(t *testing.T) {
	eachBackend(t, testNestedSerializeAndAfterCommit)
}

func testNestedSerializeAndAfterCommit(t *testing.T, d *testDB) {
	e := d.node(t, "node-a", fullConfig())
	ctx := context.Background()
	for _, fail := range []bool{false, true} {
		var ran atomic.Bool
		_, err := e.send(ctx, fmt.Sprintf("n-%v", fail), fmt.Sprintf("n-%v@x.org", fail), func(ctx context.Context, p *middleware.Pipeline) (any, error) {
			err := e.serialize(ctx, lockstore.Key{Namespace: "account", ID: "1"}, func(ctx context.Context) error {
				return txExec(ctx, "INSERT INTO outbox VALUES ($1, 'nested')", p.CommandUUID)
			})
			if err != nil {
				return nil, err
			}
			n, err := txCount(ctx, "SELECT count(*) FROM outbox WHERE id = $1", p.CommandUUID)
			if err != nil {
				return nil, err
			}
			if n != 1 {
				return nil, fmt.Errorf("nested write not in the command's transaction: %d rows", n)
			}
			lockstore.AfterCommit(ctx, func() { ran.Store(true) })
			if fail {
				return nil, errors.New("fail")
			}
			return nil, nil
		})
		n := e.count(t, "SELECT count(*) FROM outbox")
		if fail {
			require.Error(t, err)
			require.False(t, ran.Load(), "an effect of a rolled-back command ran")
			require.Equal(t, 1, n)
		} else {
			require.NoError(t, err)
			require.True(t, ran.Load())
			require.Equal(t, 1, n)
		}
	}
}
