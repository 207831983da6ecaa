package postgres

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		cfg   Config
		wants []string // substrings of the error; none means valid
	}{
		{name: "zero value", cfg: Config{}},
		{name: "full", cfg: Config{
			Namespaces: map[string]int32{"lobby": 1, "group": 2, "zero": 0, "max": 99},
			LockConns:  4, Schema: "locks", Node: "node-a", PollInterval: time.Millisecond,
			KeepAlive: time.Second, Timeout: time.Second, ReconnectBackoff: time.Second, MaxBatch: 10,
		}},
		{name: "namespace number clash", cfg: Config{Namespaces: map[string]int32{"lobby": 1, "group": 1}},
			wants: []string{`["group" "lobby"] all have number 1`}},
		{name: "namespace out of range", cfg: Config{Namespaces: map[string]int32{"big": 100, "neg": -1}},
			wants: []string{`"big" has number 100, want 0 to 99`, `"neg" has number -1`}},
		{name: "empty namespace name", cfg: Config{Namespaces: map[string]int32{"": 3}},
			wants: []string{"empty namespace"}},
		{name: "everything wrong at once", cfg: Config{
			Namespaces: map[string]int32{"a": 5, "b": 5}, LockConns: -1, Schema: string(make([]byte, 64)),
			Node: "\xff", PollInterval: -1, KeepAlive: -1, Timeout: -1, ReconnectBackoff: -1, MaxBatch: -1,
		}, wants: []string{
			"all have number 5", "LockConns is -1", "Config.Schema", "Config.Node", "PollInterval is negative",
			"KeepAlive is negative", "Timeout is negative", "ReconnectBackoff is negative", "MaxBatch is -1",
		}},
		{name: "keepalive and timeout of 1s with the default lease bound", cfg: Config{KeepAlive: time.Second, Timeout: time.Second}},
		{name: "keepalive alone, timeout derived", cfg: Config{KeepAlive: 1500 * time.Millisecond}},
		{name: "keepalive and timeout past the lease bound", cfg: Config{KeepAlive: 1500 * time.Millisecond, Timeout: time.Second},
			wants: []string{"KeepAlive + Timeout (1.5s + 1s) exceeds LeaseBound (2s)"}},
		{name: "keepalive at the lease bound", cfg: Config{LeaseBound: time.Second, KeepAlive: time.Second},
			wants: []string{"KeepAlive (1s) must be less than LeaseBound (1s)"}},
		{name: "negative capacity settings", cfg: Config{MaxHeld: -1, LocksPerConn: -2, StatementTimeout: -1, LeaseBound: -1},
			wants: []string{"MaxHeld is -1", "LocksPerConn is -2", "StatementTimeout is negative", "LeaseBound is negative"}},
		{name: "lock connection string, URL", cfg: Config{LockConnString: "postgres://u:pw@db.internal:5432/app?sslmode=disable"}},
		{name: "lock connection string, key=value", cfg: Config{LockConnString: "host=db.internal port=5432 user=u dbname=app"}},
		{name: "lock connection string, bad port", cfg: Config{LockConnString: "host=db.internal port=notaport"},
			wants: []string{"Config.LockConnString: cannot parse the connection string"}},
		{name: "lock connection string, bad sslmode", cfg: Config{LockConnString: "postgres://db.internal/app?sslmode=bogus"},
			wants: []string{"Config.LockConnString: cannot parse the connection string", "sslmode"}},
		{name: "too many lock connections", cfg: Config{LockConns: maxLockConns + 1}, wants: []string{"LockConns is 65"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.cfg.validate()
			if len(tt.wants) == 0 {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			for _, w := range tt.wants {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c := Config{}.withDefaults("app-a")
	require.Equal(t, defaultLockConns, c.LockConns)
	require.Equal(t, defaultSchema, c.Schema)
	require.Equal(t, "app-a", c.Node)
	require.Equal(t, defaultPollInterval, c.PollInterval)
	require.Equal(t, defaultLeaseBound, c.LeaseBound)
	require.Equal(t, defaultLeaseBound/4, c.KeepAlive)
	require.Equal(t, defaultLeaseBound/2, c.Timeout)
	require.LessOrEqual(t, c.KeepAlive+c.Timeout, c.LeaseBound)
	require.Equal(t, defaultLocksPerConn, c.LocksPerConn)
	require.Equal(t, defaultStatementTimeout, c.StatementTimeout)
	require.Equal(t, defaultConnectTimeout, c.ConnectTimeout)
	// Timeout never reaches past the lease bound.
	require.Equal(t, 500*time.Millisecond, Config{KeepAlive: 1500 * time.Millisecond}.withDefaults("").Timeout)
	require.Equal(t, defaultReconnectBackoff, c.ReconnectBackoff)
	require.Equal(t, defaultMaxBatch, c.MaxBatch)
	require.Equal(t, hostname(), Config{}.withDefaults("").Node)
	require.Equal(t, "mine", Config{Node: "mine"}.withDefaults("app-a").Node)
}

// TestConfigLockConnStringHidesPassword: a connection string that does not
// parse is reported without its password, in either form.
func TestConfigLockConnStringHidesPassword(t *testing.T) {
	t.Parallel()
	for _, cs := range []string{
		"postgres://user:s3cr3tpw@db.internal:notaport/app",
		"postgres://user:s3cr3tpw@db.internal/app?sslmode=bogus",
		"host=db.internal password=s3cr3tpw port=notaport",
		"host=db.internal password=s3cr3tpw sslmode=bogus",
		"postgres://user:s3cr3tpw@[::1/app",
	} {
		err := Config{LockConnString: cs}.validate()
		require.ErrorContains(t, err, "Config.LockConnString", cs)
		require.NotContains(t, err.Error(), "s3cr3tpw", cs)
	}
}
