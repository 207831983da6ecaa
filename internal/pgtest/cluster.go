package pgtest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

// Cluster is a private PostgreSQL cluster that one test controls, for fault
// tests: stop it, start it, restart it, crash it, terminate its backends. It
// runs from the local server binaries even when TEST_DATABASE_URL is set,
// and it is stopped and removed when the test ends.
//
// Server settings beyond pgtest's defaults come from ClusterConfig (see
// NewClusterWith), or from ALTER SYSTEM followed by Restart (or
// pg_reload_conf() for reloadable ones).
type Cluster struct {
	s *server
}

// ClusterConfig tunes a private cluster started by NewClusterWith.
type ClusterConfig struct {
	// Settings are server settings, name to value as in postgresql.conf,
	// passed as -c name=value at every start (so Start, Restart and
	// CrashRestart keep them), after pgtest's own (durability off, 300
	// connections, log_min_messages=warning, ...), which they override.
	// The settings pgtest owns (port, listen_addresses,
	// unix_socket_directories, data_directory) are refused. Default none.
	Settings map[string]string
}

// ownSettings are the settings pgtest sets itself and must keep: it finds
// the server through them.
var ownSettings = []string{"port", "listen_addresses", "unix_socket_directories", "data_directory"}

// Validate reports every invalid setting at once.
func (c ClusterConfig) Validate() error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(c.Settings)) {
		switch {
		case !validSettingName(name):
			errs = append(errs, fmt.Errorf("pgtest: setting name %q: want a letter or _, then letters, digits, _ or dots", name))
		case slices.Contains(ownSettings, strings.ToLower(name)):
			errs = append(errs, fmt.Errorf("pgtest: setting %s is pgtest's own", name))
		}
		if strings.IndexByte(c.Settings[name], 0) >= 0 {
			errs = append(errs, fmt.Errorf("pgtest: setting %s: the value contains a NUL byte", name))
		}
	}
	return errors.Join(errs...)
}

// validSettingName reports whether name is a server setting's name (or a
// custom one, such as auto_explain.log_min_duration).
func validSettingName(name string) bool {
	for i, r := range name {
		letter := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '_'
		if !letter && (i == 0 || (r < '0' || r > '9') && r != '.') {
			return false
		}
	}
	return name != ""
}

// args returns the settings as name=value, sorted by name.
func (c ClusterConfig) args() []string {
	var kv []string
	for _, name := range slices.Sorted(maps.Keys(c.Settings)) {
		kv = append(kv, name+"="+c.Settings[name])
	}
	return kv
}

// NewCluster initialises and starts a private cluster for t with pgtest's
// settings. Without server binaries it skips t (fails it when CI=true),
// like DSN.
func NewCluster(t testing.TB) *Cluster {
	t.Helper()
	return NewClusterWith(t, ClusterConfig{})
}

// NewClusterWith initialises and starts a private cluster for t, with the
// extra settings of cfg. An invalid cfg fails t. Without server binaries it
// skips t (fails it when CI=true), like DSN.
func NewClusterWith(t testing.TB, cfg ClusterConfig) *Cluster {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := newServer(ctx, cfg.args())
	if err != nil {
		skipOrFail(t, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.destroy(ctx); err != nil {
			t.Errorf("pgtest: remove cluster: %v", err)
		}
	})
	return &Cluster{s: s}
}

// DSN is the URL of the cluster's postgres database, as the superuser. It
// stays valid across Stop, Start and Restart (the port does not change).
func (c *Cluster) DSN() string { return c.s.dsn("postgres") }

// Stop shuts the cluster down (fast shutdown: open sessions are
// disconnected). When ctx ends first, the server is killed and Stop
// returns an error. Stopping a stopped cluster is a no-op.
func (c *Cluster) Stop(ctx context.Context) error { return c.s.stop(ctx) }

// Start starts a stopped cluster on the same port and waits until it
// accepts connections.
func (c *Cluster) Start(ctx context.Context) error { return c.s.start(ctx) }

// Restart stops and starts the cluster: every session is dropped.
func (c *Cluster) Restart(ctx context.Context) error {
	return errors.Join(c.Stop(ctx), c.Start(ctx))
}

// Crash stops the cluster as a crash would, with an immediate shutdown (as
// pg_ctl stop -m immediate: SIGQUIT to the postmaster, which ends every
// session and exits without a checkpoint). The next Start runs crash
// recovery. When ctx ends first, the server is killed and Crash returns an
// error. Crashing a stopped cluster is a no-op.
func (c *Cluster) Crash(ctx context.Context) error { return c.s.crash(ctx) }

// CrashRestart crashes the cluster (see Crash) and starts it again, on the
// same port and with the same settings; the start runs crash recovery
// (replays the WAL since the last checkpoint) before it accepts
// connections.
func (c *Cluster) CrashRestart(ctx context.Context) error {
	return errors.Join(c.Crash(ctx), c.Start(ctx))
}

// TerminateBackends runs pg_terminate_backend on every backend of the
// cluster (any database) whose application_name is applicationName, waits
// until they are gone, and returns how many there were.
func (c *Cluster) TerminateBackends(ctx context.Context, applicationName string) (int, error) {
	return terminate(ctx, c.DSN(), applicationName, false)
}
