package pgtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		helperProcess()
		return
	}
	Main(m)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func databaseExists(t *testing.T, name string) bool {
	t.Helper()
	c, err := pgx.Connect(ctxT(t), sharedURL(t))
	require.NoError(t, err)
	defer c.Close(context.Background())
	var n int
	require.NoError(t, c.QueryRow(ctxT(t), "SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n))
	return n == 1
}

func TestDatabasePerTestIsIsolatedAndDropped(t *testing.T) {
	t.Parallel()
	var names [2]string
	t.Run("use", func(t *testing.T) {
		ctx := ctxT(t)
		a := Pool(t, PoolConfig{})
		b := Pool(t, PoolConfig{})
		require.NoError(t, a.QueryRow(ctx, "SELECT current_database()").Scan(&names[0]))
		require.NoError(t, b.QueryRow(ctx, "SELECT current_database()").Scan(&names[1]))
		require.NotEqual(t, names[0], names[1])
		require.True(t, strings.HasPrefix(names[0], "pgtest_testdatabasepertest"), names[0])

		_, err := a.Exec(ctx, "CREATE TABLE only_in_a (x int); INSERT INTO only_in_a VALUES (1)")
		require.NoError(t, err)
		_, err = b.Exec(ctx, "SELECT * FROM only_in_a")
		require.ErrorContains(t, err, "does not exist")

		// A connection left open must not block the drop (WITH (FORCE)).
		c, err := pgx.Connect(ctx, DSN(t))
		require.NoError(t, err)
		_ = c // never closed on purpose; the drop terminates it
		require.True(t, databaseExists(t, names[0]))
	})
	require.False(t, databaseExists(t, names[0]), "database of a finished test still exists")
	require.False(t, databaseExists(t, names[1]), "database of a finished test still exists")
}

func TestPoolConfigApplies(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	pool := Pool(t, PoolConfig{MaxConns: 3, ApplicationName: "node-a"})
	require.EqualValues(t, 3, pool.Config().MaxConns)
	var app string
	require.NoError(t, pool.QueryRow(ctx, "SELECT current_setting('application_name')").Scan(&app))
	require.Equal(t, "node-a", app)

	def := Pool(t, PoolConfig{})
	require.NoError(t, def.QueryRow(ctx, "SELECT current_setting('application_name')").Scan(&app))
	require.Equal(t, "pgtest", app)
}

func TestTerminateBackendsOnSharedServer(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	dsn := DSN(t)
	victim := Connect(t, dsn, PoolConfig{ApplicationName: "victim"})
	other := Connect(t, dsn, PoolConfig{ApplicationName: "bystander"})
	conn, err := victim.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	var pid int32
	require.NoError(t, conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
	require.NoError(t, other.Ping(ctx))

	n, err := TerminateBackends(ctx, dsn, "victim")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	_, err = conn.Exec(ctx, "SELECT 1")
	require.Error(t, err, "a terminated backend still answers")
	require.NoError(t, other.Ping(ctx), "a bystander was terminated")
}

func TestClusterRestartAndPoolReconnects(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	c := NewCluster(t)
	pool := Connect(t, c.DSN(), PoolConfig{MaxConns: 2, ApplicationName: "app"})

	startTime := func() (time.Time, error) {
		var ts time.Time
		err := pool.QueryRow(ctx, "SELECT pg_postmaster_start_time()").Scan(&ts)
		return ts, err
	}
	before, err := startTime()
	require.NoError(t, err)

	require.NoError(t, c.Stop(ctx))
	_, err = startTime()
	require.Error(t, err, "a stopped cluster answered")

	require.NoError(t, c.Restart(ctx)) // Stop of a stopped cluster is a no-op
	// The pool drops its dead connections and reconnects.
	var after time.Time
	require.Eventually(t, func() bool {
		after, err = startTime()
		return err == nil
	}, 30*time.Second, 20*time.Millisecond)
	require.True(t, after.After(before), "postmaster start time did not change: %v, %v", before, after)

	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	n, err := c.TerminateBackends(ctx, "app")
	require.NoError(t, err)
	require.GreaterOrEqual(t, n, 1)
	_, err = conn.Exec(ctx, "SELECT 1")
	require.Error(t, err)
}

func TestClusterIsRemovedWhenTheTestEnds(t *testing.T) {
	t.Parallel()
	var dir string
	var pid int
	t.Run("cluster", func(t *testing.T) {
		c := NewCluster(t)
		dir = c.s.dir
		pid = c.s.proc.Process.Pid
		require.DirExists(t, dir)
	})
	require.NoDirExists(t, dir)
	require.True(t, processGone(pid), "postmaster %d still runs", pid)
}

// processGone reports whether pid no longer names a live process.
func processGone(pid int) bool {
	err := syscall.Kill(pid, 0)
	if errors.Is(err, syscall.ESRCH) {
		return true
	}
	// A zombie (exited, not reaped by its new parent yet) is gone too.
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	fields := strings.Fields(string(b))
	return len(fields) > 2 && fields[2] == "Z"
}

const helperEnv = "PGTEST_HELPER_PROCESS"

// helperProcess starts a cluster, prints its directory and postmaster pid,
// and blocks until killed.
func helperProcess() {
	s, err := newServer(context.Background(), nil)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	fmt.Println(s.dir, s.proc.Process.Pid)
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // the parent never writes
	os.Exit(3)
}

func TestKilledBinaryLeavesNothing(t *testing.T) {
	t.Parallel()
	if _, err := findBinaries(); err != nil {
		skipOrFail(t, err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	defer stdin.Close()
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "helper said nothing")
	fields := strings.Fields(line)
	require.Len(t, fields, 2, "helper: %s", line)
	dir := fields[0]
	pid, err := strconv.Atoi(fields[1])
	require.NoError(t, err)
	require.DirExists(t, dir)
	require.False(t, processGone(pid))

	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	require.Eventually(t, func() bool {
		_, err := os.Stat(dir)
		return errors.Is(err, os.ErrNotExist) && processGone(pid)
	}, 30*time.Second, 20*time.Millisecond, "cluster of a killed binary left behind: %s, pid %d", dir, pid)
}
