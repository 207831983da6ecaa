package txcommand_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	cspostgres "github.com/claimbus/claimbus/claimstore/postgres"
	"github.com/claimbus/claimbus/commands"
	"github.com/claimbus/claimbus/idempotency"
	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/postgres"
	"github.com/claimbus/claimbus/middleware"
	"github.com/claimbus/claimbus/txcommand"
	"github.com/claimbus/claimbus/uniqueness"
)

func TestMain(m *testing.M) {
	if os.Getenv(childDSN) != "" {
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

// env is one node: its pool, stores and runner.
type env struct {
	pool   *pgxpool.Pool
	locks  *postgres.Store
	claims *cspostgres.Store
	runner *middleware.Runner
}

// newDB returns a fresh database with the schema.
func newDB(t testing.TB) string {
	t.Helper()
	dsn := pgtest.DSN(t)
	pool := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "setup"})
	_, err := pool.Exec(context.Background(), schema)
	require.NoError(t, err)
	return dsn
}

// newNode returns a node on dsn whose middleware is configured by cfg
// (Locks and Claims filled in).
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
	cfg.Locks, cfg.Claims = locks, claims
	m, err := txcommand.New(cfg)
	require.NoError(t, err)
	r, err := middleware.NewRunner(middleware.RunnerConfig{Middleware: []middleware.Middleware{m}})
	require.NoError(t, err)
	return &env{pool: pool, locks: locks, claims: claims, runner: r}
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
	tx, ok := postgres.TxFrom(ctx)
	if !ok {
		return nil, errors.New("no transaction in the handler's ctx")
	}
	if _, err := tx.Exec(ctx, "INSERT INTO staff_events (id, email) VALUES ($1, $2)", c.StaffID, uniqueness.NormalizeEmail(c.Email)); err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, "INSERT INTO outbox (id, payload) VALUES ($1, $2)", c.StaffID, "StaffRegistered"); err != nil {
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

// counts returns the rows of staff_events, claim_reservation, claim_outcome
// and outbox.
func counts(t testing.TB, pool *pgxpool.Pool) (events, reservations, outcomes, outbox int) {
	t.Helper()
	err := pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM staff_events), (SELECT count(*) FROM claimbus.claim_reservation),
		(SELECT count(*) FROM claimbus.claim_outcome), (SELECT count(*) FROM outbox)`).Scan(&events, &reservations, &outcomes, &outbox)
	require.NoError(t, err)
	return events, reservations, outcomes, outbox
}

func TestConfigValidate(t *testing.T) {
	require.ErrorContains(t, txcommand.Config{}.Validate(), "Config.Locks is nil")
	require.ErrorContains(t, txcommand.Config{}.Validate(), "neither Config.Rules nor Config.Idempotency")
	bad := txcommand.Unique(uniqueness.Names{Field: "", Scope: ""}, (func(*commands.CreateStaff) string)(nil), "")
	err := txcommand.Config{Rules: []txcommand.Rule{bad, {}}}.Validate()
	for _, want := range []string{"empty field name", "not a valid lock namespace", "nil value function", "empty lookup SQL", "zero Rule"} {
		require.ErrorContains(t, err, want)
	}
	err = txcommand.Config{Rules: []txcommand.Rule{emailRule, emailRule}, Idempotency: &txcommand.Idempotency{}}.Validate()
	for _, want := range []string{"a second rule", "Config.Claims is nil", "Idempotency.Key is nil", "Retention is 0s"} {
		require.ErrorContains(t, err, want)
	}
}

func TestCommitsTogetherAndAnswersRepeats(t *testing.T) {
	dsn := newDB(t)
	e := newNode(t, dsn, "node-a", fullConfig())
	ctx := context.Background()

	res, err := e.send(ctx, "c1", " Ann@X.org", register)
	require.NoError(t, err)
	require.Equal(t, "staff-c1", res)
	ev, rs, oc, ob := counts(t, e.pool)
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
	_, err = e.pool.Exec(ctx, "INSERT INTO staff_read SELECT id, email FROM staff_events")
	require.NoError(t, err)
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

func TestFailuresLeaveNothing(t *testing.T) {
	dsn := newDB(t)
	e := newNode(t, dsn, "node-a", fullConfig())
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
			ev, rs, oc, ob := counts(t, e.pool)
			require.Equal(t, [4]int{0, 0, tt.outcomes, 0}, [4]int{ev, rs, oc, ob})
		})
	}

	// A halt by a later hook rolls back too.
	halting := middleware.Hooks{OnBeforeDispatch: func(_ context.Context, p *middleware.Pipeline) {
		p.Halt(middleware.Reject(middleware.CodeLocked, "", "halted"))
	}}
	m, err := txcommand.New(txcommand.Config{Locks: e.locks, Claims: e.claims, Rules: []txcommand.Rule{emailRule}})
	require.NoError(t, err)
	r, err := middleware.NewRunner(middleware.RunnerConfig{Middleware: []middleware.Middleware{m, halting}})
	require.NoError(t, err)
	p := middleware.NewPipeline(ctx, &commands.CreateStaff{StaffID: "s-h", Email: "h@x.org"})
	p.CommandUUID = "h"
	_, err = r.Run(ctx, p, register)
	require.ErrorIs(t, err, middleware.ErrLocked)
	ev, rs, _, ob := counts(t, e.pool)
	require.Equal(t, [3]int{0, 0, 0}, [3]int{ev, rs, ob})
	var held int
	require.NoError(t, e.pool.QueryRow(ctx, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'").Scan(&held))
	require.Zero(t, held, "no lock is left held")
}

// TestOneWinnerPerEmail sends many commands for few emails from many
// goroutines on two nodes, with the read model never caught up (a
// projection stalled for the whole test): one event per email, the others
// already_taken, nothing else.
func TestOneWinnerPerEmail(t *testing.T) {
	dsn := newDB(t)
	nodes := []*env{newNode(t, dsn, "node-a", fullConfig()), newNode(t, dsn, "node-b", fullConfig())}
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
	var dup int
	require.NoError(t, nodes[0].pool.QueryRow(context.Background(),
		"SELECT count(*) FROM (SELECT email FROM staff_events GROUP BY email HAVING count(*) > 1) d").Scan(&dup))
	require.Zero(t, dup)
}

// TestWaiterSeesTheHoldersOutcome: a waiter behind a holder that commits
// gets already_taken from its own lookup; behind one that rolls back, it
// runs.
func TestWaiterSeesTheHoldersOutcome(t *testing.T) {
	dsn := newDB(t)
	cfg := txcommand.Config{Rules: []txcommand.Rule{txcommand.Unique(uniqueness.Names{Field: "email", Scope: "staff.email"},
		func(c *commands.CreateStaff) string { return c.Email }, "SELECT 1 FROM staff_events WHERE email = $1")}}
	a, b := newNode(t, dsn, "node-a", cfg), newNode(t, dsn, "node-b", cfg)
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
			// The waiter is at the server, waiting for the holder's lock.
			require.Eventually(t, func() bool {
				var n int
				_ = a.pool.QueryRow(ctx, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted").Scan(&n)
				return n == 1
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

// TestCommitFailureIsTheCommandsError: the COMMIT's round trip failing on
// the server (a reservation the primary key refuses: a row written beside
// the middleware) fails the command with not_applied, and nothing of it
// commits.
func TestCommitFailureIsTheCommandsError(t *testing.T) {
	dsn := newDB(t)
	e := newNode(t, dsn, "node-a", fullConfig())
	ctx := context.Background()
	_, err := e.send(ctx, "c1", "k@x.org", func(ctx context.Context, p *middleware.Pipeline) (any, error) {
		tx, _ := postgres.TxFrom(ctx)
		// Another connection writes the reservation the commit will insert.
		if _, err := e.pool.Exec(ctx, `INSERT INTO claimbus.claim_reservation VALUES ('staff.email', 'k@x.org', 'other', true, now())`); err != nil {
			return nil, err
		}
		_, err := tx.Exec(ctx, "INSERT INTO staff_events (id, email) VALUES ('s', 'k@x.org')")
		return "ok", err
	})
	require.ErrorIs(t, err, middleware.ErrNotApplied)
	require.Equal(t, 503, middleware.HTTPStatus(err))
	ev, rs, oc, _ := counts(t, e.pool)
	require.Equal(t, [3]int{0, 1, 0}, [3]int{ev, rs, oc}, "only the row written beside it")
}

// TestClaimTimeout: a command whose lock stays held past ClaimTimeout is
// refused with timeout, apart from its own request's deadline, whether it
// waits for its node's turn or, behind another node, at the server.
func TestClaimTimeout(t *testing.T) {
	dsn := newDB(t)
	cfg := fullConfig()
	cfg.ClaimTimeout = 300 * time.Millisecond
	a, b := newNode(t, dsn, "node-a", cfg), newNode(t, dsn, "node-b", cfg)
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
// transaction to postgres.Serialize, which nests in it, and
// lockstore.AfterCommit runs only once the command committed.
func TestNestedSerializeAndAfterCommit(t *testing.T) {
	dsn := newDB(t)
	e := newNode(t, dsn, "node-a", fullConfig())
	ctx := context.Background()
	for _, fail := range []bool{false, true} {
		var ran atomic.Bool
		_, err := e.send(ctx, fmt.Sprintf("n-%v", fail), fmt.Sprintf("n-%v@x.org", fail), func(ctx context.Context, p *middleware.Pipeline) (any, error) {
			outer, _ := postgres.TxFrom(ctx)
			_, err := postgres.Serialize(ctx, e.locks, lockstore.Key{Namespace: "account", ID: "1"}, func(ctx context.Context, tx pgx.Tx) (int, error) {
				_, err := tx.Exec(ctx, "INSERT INTO outbox VALUES ($1, 'nested')", p.CommandUUID)
				return 0, err
			})
			if err != nil {
				return nil, err
			}
			var n int
			if err := outer.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE id = $1", p.CommandUUID).Scan(&n); err != nil {
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
		var n int
		require.NoError(t, e.pool.QueryRow(ctx, "SELECT count(*) FROM outbox").Scan(&n))
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
