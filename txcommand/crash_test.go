package txcommand_test

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	cspostgres "github.com/claimbus/claimbus/claimstore/postgres"
	cssqlite "github.com/claimbus/claimbus/claimstore/sqlite"
	"github.com/claimbus/claimbus/commands"
	"github.com/claimbus/claimbus/internal/faultproxy"
	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/postgres"
	locksqlite "github.com/claimbus/claimbus/lockstore/sqlite"
	"github.com/claimbus/claimbus/middleware"
	"github.com/claimbus/claimbus/txcommand"
)

// The crash tests stop a command at one of its steps, then kill the
// process running it (kill -9) or end its database session
// (pg_terminate_backend), and send the command again with the same key
// on another node (on SQLite, in the next process on the file).

// Steps a command is stopped at.
const (
	stepLocked      = "locked"       // the locks granted and the lookups done: the handler starts
	stepWritten     = "written"      // the handler's write sent and answered
	stepCommitSent  = "commit-sent"  // COMMIT sent: the server runs a slow deferred trigger
	stepAfterCommit = "after-commit" // COMMIT answered: the AfterCommit effects run
	stepCommitAnswd = "committed"    // COMMIT answered, the middleware returned
)

// slowCommit makes COMMIT of a transaction that appended an event whose
// email starts with "slow" take a while on the server, so that a test can
// act while COMMIT is on its way.
const slowCommit = `CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.email LIKE 'slow%' THEN PERFORM pg_sleep(2); END IF;
	RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON staff_events
	DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit();`

// Environment of the child process: the database (a PostgreSQL DSN or a
// SQLite file's path) and the step to stop at.
const (
	childDSN  = "TXCOMMAND_CRASH_DSN"
	childPath = "TXCOMMAND_CRASH_PATH"
	childStep = "TXCOMMAND_CRASH_STEP"
)

// stopAt returns the handler and the outer middleware that call at(step)
// when the command reaches step.
func stopAt(step string, at func()) (middleware.HandlerFunc, middleware.Middleware) {
	h := func(ctx context.Context, p *middleware.Pipeline) (any, error) {
		if step == stepLocked {
			at()
		}
		res, err := register(ctx, p)
		if err == nil && step == stepWritten {
			at()
		}
		if step == stepAfterCommit {
			lockstore.AfterCommit(ctx, at)
		}
		return res, err
	}
	outer := middleware.Hooks{OnAfterDispatch: func(_ context.Context, p *middleware.Pipeline) {
		if step == stepCommitAnswd && p.Err() == nil {
			at()
		}
	}}
	return h, outer
}

// crashChild is the child process: one node that sends one command and
// stops at the step, printing the step's name, until it is killed.
func crashChild() int {
	ctx := context.Background()
	cfg := fullConfig()
	var err error
	if cfg.Backend, err = childBackend(ctx); err != nil {
		fmt.Println("error:", err)
		return 1
	}
	m, err := txcommand.New(cfg)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	step := os.Getenv(childStep)
	if step == "storm" {
		return stormChild(ctx, m)
	}
	h, outer := stopAt(step, func() {
		fmt.Println("at", step)
		select {} // until killed
	})
	r, err := middleware.NewRunner(middleware.RunnerConfig{Middleware: []middleware.Middleware{outer, m}})
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	if step == stepCommitSent {
		fmt.Println("at", step) // the parent watches the server for COMMIT
	}
	p := middleware.NewPipeline(ctx, &commands.CreateStaff{StaffID: "staff-crash-" + step, Email: crashEmail(step), Name: "N"})
	p.CommandName, p.CommandUUID = "commands.CreateStaff", "crash-"+step
	_, err = r.Run(ctx, p, h)
	fmt.Println("returned:", err)
	select {}
}

// childBackend is the child's backend on its database.
func childBackend(ctx context.Context) (txcommand.Backend, error) {
	if path := os.Getenv(childPath); path != "" {
		db, err := sql.Open("sqlite", locksqlite.DSN(path, 5*time.Second))
		if err != nil {
			return nil, err
		}
		locks, err := locksqlite.New(ctx, db, locksqlite.Config{})
		if err != nil {
			return nil, err
		}
		claims, err := cssqlite.New(ctx, db, cssqlite.Config{})
		return txcommand.SQLite(locks, claims), err
	}
	pool, err := pgxpool.New(ctx, os.Getenv(childDSN)+"&application_name=crash-child")
	if err != nil {
		return nil, err
	}
	locks, err := postgres.New(ctx, pool, postgres.Config{})
	if err != nil {
		return nil, err
	}
	claims, err := cspostgres.New(ctx, pool, cspostgres.Config{})
	return txcommand.Postgres(locks, claims), err
}

// crashEmail is the email of the command stopped at step.
func crashEmail(step string) string {
	if step == stepCommitSent {
		return "slow-" + step + "@x.org"
	}
	return step + "@x.org"
}

// waitCommitSent waits until the session named app runs COMMIT.
func waitCommitSent(t *testing.T, pool *pgxpool.Pool, app string) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = $1 AND state = 'active' AND query = 'commit'`, app).Scan(&n)
		return err == nil && n == 1
	}, 20*time.Second, 5*time.Millisecond, "COMMIT never reached the server")
}

// repeatAndCheck sends the command of step again with its key on node e,
// and checks the contract: exactly one event for its email, the repeat
// answered with the committed outcome (its handler not run) when the
// first run committed, or run for the first time; and another command for
// the email refused.
func repeatAndCheck(t *testing.T, e *env, step string, committed bool) {
	t.Helper()
	ctx := context.Background()
	ran := false
	p := middleware.NewPipeline(ctx, &commands.CreateStaff{StaffID: "staff-crash-" + step, Email: crashEmail(step), Name: "N"})
	p.CommandName, p.CommandUUID = "commands.CreateStaff", "crash-"+step
	res, err := e.runner.Run(ctx, p, func(ctx context.Context, p *middleware.Pipeline) (any, error) {
		ran = true
		return register(ctx, p)
	})
	require.NoError(t, err)
	require.Equal(t, !committed, ran, "the repeat ran its handler: the first run had committed %v", committed)
	if committed {
		require.JSONEq(t, `"staff-crash-`+step+`"`, string(res.(json.RawMessage)))
	} else {
		require.Equal(t, "staff-crash-"+step, res)
	}
	rs, oc := e.claimTables()
	events := e.count(t, "SELECT count(*) FROM staff_events WHERE email = $1", crashEmail(step))
	reservations := e.count(t, "SELECT count(*) FROM "+rs+" WHERE id = $1", crashEmail(step))
	outcomes := e.count(t, "SELECT count(*) FROM "+oc+" WHERE id = $1", "crash-"+step)
	require.Equal(t, [3]int{1, 1, 1}, [3]int{events, reservations, outcomes}, "one event, one reservation, one outcome")
	_, err = e.send(ctx, "other-"+step, crashEmail(step), register)
	require.ErrorIs(t, err, middleware.ErrAlreadyTaken)
}

// TestKilledAtEachStep kills a real child process (kill -9) at each step
// of a command, then repeats the command on another node (on SQLite, in
// this process once the child is gone: one process at a time has the
// file). SQLite has no step between COMMIT sent and COMMIT answered.
func TestKilledAtEachStep(t *testing.T) { eachBackend(t, testKilledAtEachStep) }

func testKilledAtEachStep(t *testing.T, pgDB *testDB) {
	steps := []string{stepLocked, stepWritten, stepAfterCommit, stepCommitAnswd}
	var setup *pgxpool.Pool
	if pgDB.kind == onPostgres {
		setup = pgtest.Connect(t, pgDB.dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "watch"})
		_, err := setup.Exec(context.Background(), slowCommit)
		require.NoError(t, err)
		steps = append(steps, stepCommitSent)
	}
	for _, step := range steps {
		t.Run(step, func(t *testing.T) {
			d, env := pgDB, childDSN+"="+pgDB.dsn
			if d.kind == onSQLite {
				d = newTestDB(t, onSQLite) // a fresh file, that no store of this process holds
				env = childPath + "=" + d.path
			}
			cmd := startChild(t, env, step, "at "+step)
			if step == stepCommitSent {
				waitCommitSent(t, setup, "crash-child")
			}
			require.NoError(t, cmd.Process.Kill())
			_ = cmd.Wait()
			// A COMMIT on its way when the client died still commits: the
			// server finishes it.
			repeatAndCheck(t, d.node(t, "node-b", fullConfig()), step, step != stepLocked && step != stepWritten)
		})
	}
}

// TestSessionEndedAtEachStep ends the command's database session
// (pg_terminate_backend) at each step before COMMIT is answered: the
// sender learns that the command did not apply (the server says so, even
// for a COMMIT on its way), and the repeat runs for the first time.
func TestSessionEndedAtEachStep(t *testing.T) {
	dsn := newDB(t)
	setup := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "watch"})
	_, err := setup.Exec(context.Background(), slowCommit)
	require.NoError(t, err)
	a := newNode(t, dsn, "node-a", fullConfig())
	b := newNode(t, dsn, "node-b", fullConfig())
	ctx := context.Background()
	terminate := func() {
		_, err := pgtest.TerminateBackends(ctx, dsn, "node-a")
		require.NoError(t, err)
	}
	for _, step := range []string{stepLocked, stepWritten, stepCommitSent} {
		t.Run(step, func(t *testing.T) {
			h, outer := stopAt(step, terminate)
			r, err := middleware.NewRunner(middleware.RunnerConfig{Middleware: []middleware.Middleware{outer, mustNew(t, a)}})
			require.NoError(t, err)
			done := make(chan error, 1)
			go func() {
				p := middleware.NewPipeline(ctx, &commands.CreateStaff{StaffID: "staff-crash-" + step, Email: crashEmail(step), Name: "N"})
				p.CommandName, p.CommandUUID = "commands.CreateStaff", "crash-"+step
				_, err := r.Run(ctx, p, h)
				done <- err
			}()
			if step == stepCommitSent {
				waitCommitSent(t, setup, "node-a")
				terminate()
			}
			err = <-done
			require.Error(t, err)
			require.NotErrorIs(t, err, middleware.ErrOutcomeUnknown, "the server answered")
			if step != stepLocked {
				// The commit's answer is the server's error: nothing applied.
				require.ErrorIs(t, err, middleware.ErrNotApplied)
			}
			repeatAndCheck(t, b, step, false)
		})
	}
}

// mustNew returns a txcommand middleware on e's stores.
func mustNew(t *testing.T, e *env) *txcommand.Middleware {
	t.Helper()
	cfg := fullConfig()
	cfg.Backend = e.backend
	m, err := txcommand.New(cfg)
	require.NoError(t, err)
	return m
}

// TestCommitUnansweredIsOutcomeUnknown cuts the network between the node
// and PostgreSQL while COMMIT is on its way: the sender gets
// outcome_unknown, the server commits all the same (nothing reaches it to
// say otherwise), and the repeat with the key gets the committed outcome.
func TestCommitUnansweredIsOutcomeUnknown(t *testing.T) {
	dsn := newDB(t)
	setup := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "watch"})
	_, err := setup.Exec(context.Background(), slowCommit)
	require.NoError(t, err)
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	proxy, err := faultproxy.New(u.Host)
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	u.Host = proxy.Addr()
	a := newNode(t, u.String(), "node-a", fullConfig())
	b := newNode(t, dsn, "node-b", fullConfig())
	done := make(chan error, 1)
	go func() {
		_, err := a.send(context.Background(), "crash-"+stepCommitSent, crashEmail(stepCommitSent), register)
		done <- err
	}()
	waitCommitSent(t, setup, "node-a")
	// pgx sends a cancel request when its connection breaks, which would
	// abort the COMMIT: the network is down for new connections too.
	proxy.SetNewConns(faultproxy.Refuse)
	require.Positive(t, proxy.Cut())
	err = <-done
	require.ErrorIs(t, err, middleware.ErrOutcomeUnknown)
	require.Equal(t, 503, middleware.HTTPStatus(err))
	repeatAndCheck(t, b, stepCommitSent, true)
}

// startChild starts the test binary as a child process running step on
// the database env names (see crashChild), and returns once it printed
// want.
func startChild(t *testing.T, env, step, want string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env, childStep+"="+step)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, want, strings.TrimSpace(line))
	return cmd
}
