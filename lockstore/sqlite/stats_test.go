package sqlite_test

import (
	"context"
	"database/sql"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/sqlite"
)

// TestStats: the store reports the lock a Serialize holds and the call
// queued behind it, and nothing once both are done; it opens no lock
// connections of its own.
func TestStats(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	db, _ := newDB(t)
	s := newStore(t, db, sqlite.Config{})
	var _ lockstore.StatsReporter = s
	k := key("stats")
	inside, leave := make(chan struct{}), make(chan struct{})
	done := make(chan error, 2)
	go func() {
		done <- s.Serialize(ctx, k, func(context.Context, *sql.Tx) error {
			close(inside)
			<-leave
			return nil
		})
	}()
	<-inside
	go func() { done <- s.Serialize(ctx, k, func(context.Context, *sql.Tx) error { return nil }) }()
	for s.Stats().Waiting == 0 {
		// Waiting turns 1 once the second call queued; nothing else can.
		runtime.Gosched()
	}
	st := s.Stats()
	require.EqualValues(t, 1, st.Held)
	require.EqualValues(t, 1, st.Waiting)
	require.Zero(t, st.Conns)
	close(leave)
	require.NoError(t, <-done)
	require.NoError(t, <-done)
	st = s.Stats()
	require.Zero(t, st.Held)
	require.Zero(t, st.Waiting)
}
