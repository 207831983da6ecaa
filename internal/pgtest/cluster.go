package pgtest

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Cluster is a private PostgreSQL cluster that one test controls, for fault
// tests: stop it, start it, restart it, terminate its backends. It runs from
// the local server binaries even when TEST_DATABASE_URL is set, and it is
// stopped and removed when the test ends.
//
// Server settings beyond pgtest's defaults are set with ALTER SYSTEM
// followed by Restart (or pg_reload_conf() for reloadable ones).
type Cluster struct {
	s *server
}

// NewCluster initialises and starts a private cluster for t. Without server
// binaries it skips t (fails it when CI=true), like DSN.
func NewCluster(t testing.TB) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := newServer(ctx)
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

// TerminateBackends runs pg_terminate_backend on every backend of the
// cluster (any database) whose application_name is applicationName, waits
// until they are gone, and returns how many there were.
func (c *Cluster) TerminateBackends(ctx context.Context, applicationName string) (int, error) {
	return terminate(ctx, c.DSN(), applicationName, false)
}
