package pgtest

import (
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

func TestClusterSettingsSurviveRestart(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	c := NewClusterWith(t, ClusterConfig{Settings: map[string]string{
		"synchronous_commit":        "on", // pgtest's own is off: the extra one must win
		"max_locks_per_transaction": "16", // read at server start only
	}})
	requireSettings := func() {
		t.Helper()
		conn, err := pgx.Connect(ctx, c.DSN())
		require.NoError(t, err)
		defer conn.Close(ctx)
		var syncCommit, maxLocks string
		require.NoError(t, conn.QueryRow(ctx,
			"SELECT current_setting('synchronous_commit'), current_setting('max_locks_per_transaction')").
			Scan(&syncCommit, &maxLocks))
		require.Equal(t, "on", syncCommit)
		require.Equal(t, "16", maxLocks)
	}
	requireSettings()
	require.NoError(t, c.Restart(ctx))
	requireSettings()
}
