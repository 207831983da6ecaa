package postgres

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/lockstore"
)

// helperNodeEnv, when set to a connection string, turns the test binary
// into a node for TestKilledNodeLocksAreFreed: it takes helperKey, prints
// its token and waits to be killed.
const helperNodeEnv = "CLAIMBUS_POSTGRES_HELPER_NODE"

var helperKey = lockstore.Key{Namespace: "killed", ID: "node"}

// TestKilledNodeLocksAreFreed kills (SIGKILL) a node process that holds a
// key, and measures how soon another node takes it.
func TestKilledNodeLocksAreFreed(t *testing.T) {
	if dsn := os.Getenv(helperNodeEnv); dsn != "" {
		runHelperNode(dsn)
		return
	}
	t.Parallel()
	ctx := testCtx(t)
	dsn := pgtest.DSN(t)
	pool := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "node-survivor"})
	s := newTestStore(t, pool, Config{PollInterval: 10 * time.Millisecond})

	cmd := exec.Command(os.Args[0], "-test.run=^TestKilledNodeLocksAreFreed$")
	cmd.Env = append(os.Environ(), helperNodeEnv+"="+dsn)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "the helper node reports its lock")
	token, err := strconv.ParseInt(strings.TrimPrefix(strings.TrimSpace(line), "locked "), 10, 64)
	require.NoError(t, err, "helper said %q", line)

	_, err = s.TryLock(ctx, helperKey)
	require.ErrorIs(t, err, lockstore.ErrLocked, "the helper node holds the key")
	granted := make(chan lockstore.Lock, 1)
	go func() {
		l, err := s.Lock(ctx, helperKey)
		if err != nil {
			t.Error(err)
		}
		granted <- l
	}()
	waitFor(t, "the survivor polling", func() bool { return turnTaken(s, helperKey) })

	start := time.Now()
	require.NoError(t, cmd.Process.Kill())
	l := <-granted
	freed := time.Since(start)
	require.NotNil(t, l)
	t.Logf("a killed node's lock was taken by another node %v after SIGKILL (PollInterval 10ms)", freed)
	require.Greater(t, l.Token(), token)
	require.NoError(t, l.Release(ctx))
}

// runHelperNode is the killed node: it never returns.
func runHelperNode(dsn string) {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err == nil {
		cfg.ConnConfig.RuntimeParams["application_name"] = "node-killed"
		var pool *pgxpool.Pool
		if pool, err = pgxpool.NewWithConfig(ctx, cfg); err == nil {
			var s *Store
			if s, err = New(ctx, pool, Config{}); err == nil {
				var l lockstore.Lock
				if l, err = s.TryLock(ctx, helperKey); err == nil {
					fmt.Printf("locked %d\n", l.Token())
				}
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper node:", err)
		os.Exit(2)
	}
	select {} // until killed
}
