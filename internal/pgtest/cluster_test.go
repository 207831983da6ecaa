package pgtest

import (
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

func TestClusterConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		settings map[string]string
		want     []string // every problem reported, "" for none
	}{
		{"none", nil, nil},
		{"valid", map[string]string{
			"synchronous_commit": "off", "auto_explain.log_min_duration": "0", "search_path": `"$user", public`,
		}, nil},
		{"empty name", map[string]string{"": "x"}, []string{`setting name ""`}},
		{"bad names", map[string]string{"a=b": "x", "1abc": "x", "with space": "x"},
			[]string{`setting name "a=b"`, `setting name "1abc"`, `setting name "with space"`}},
		{"pgtest's own", map[string]string{"port": "5433", "Listen_Addresses": "*"},
			[]string{"setting port is pgtest's own", "setting Listen_Addresses is pgtest's own"}},
		{"NUL in a value", map[string]string{"application_name": "a\x00b"}, []string{"contains a NUL byte"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := ClusterConfig{Settings: tc.settings}.Validate()
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			for _, w := range tc.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
}

func TestClusterSettingsAndCrashRestart(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	c := NewClusterWith(t, ClusterConfig{Settings: map[string]string{
		"synchronous_commit":        "on",  // pgtest's own is off: the extra one must win
		"max_locks_per_transaction": "16",  // read at server start only
		"log_min_messages":          "log", // so that the log tells of recovery
	}})
	query := func(sql string, dst ...any) {
		t.Helper()
		conn, err := pgx.Connect(ctx, c.DSN())
		require.NoError(t, err)
		defer conn.Close(ctx)
		if len(dst) == 0 {
			_, err = conn.Exec(ctx, sql)
		} else {
			err = conn.QueryRow(ctx, sql).Scan(dst...)
		}
		require.NoError(t, err, sql)
	}
	requireSettings := func() {
		t.Helper()
		var syncCommit, maxLocks string
		query("SELECT current_setting('synchronous_commit'), current_setting('max_locks_per_transaction')",
			&syncCommit, &maxLocks)
		require.Equal(t, "on", syncCommit)
		require.Equal(t, "16", maxLocks)
	}
	// logAfter runs fn and returns what the server logged meanwhile.
	logAfter := func(fn func() error) string {
		t.Helper()
		before, err := os.ReadFile(c.s.logPath)
		require.NoError(t, err)
		require.NoError(t, fn())
		after, err := os.ReadFile(c.s.logPath)
		require.NoError(t, err)
		return string(after[len(before):])
	}
	const notShutDown = "database system was not properly shut down; automatic recovery in progress"
	requireSettings()

	// A clean restart keeps the settings and needs no recovery.
	log := logAfter(func() error { return c.Restart(ctx) })
	require.Contains(t, log, "database system was shut down at")
	require.NotContains(t, log, notShutDown)
	requireSettings()

	// A crash after a commit: no checkpoint since, so only the WAL has the
	// row, and the start after the crash replays it.
	query("CREATE TABLE survivor (x int); INSERT INTO survivor VALUES (42)")
	log = logAfter(func() error { return c.CrashRestart(ctx) })
	require.Contains(t, log, "received immediate shutdown request")
	require.Contains(t, log, notShutDown)
	require.Contains(t, log, "redo starts at")
	requireSettings()
	var x int
	query("SELECT x FROM survivor", &x)
	require.Equal(t, 42, x)

	// Crash then Start, apart: the cluster is down in between.
	require.NoError(t, c.Crash(ctx))
	_, err := pgx.Connect(ctx, c.DSN())
	require.Error(t, err, "a crashed cluster accepted a connection")
	require.NoError(t, c.Crash(ctx), "crashing a stopped cluster")
	log = logAfter(func() error { return c.Start(ctx) })
	require.Contains(t, log, notShutDown)
	requireSettings()
}
