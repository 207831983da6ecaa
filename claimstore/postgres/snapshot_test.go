package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/claimstore"
	"github.com/claimbus/claimbus/claimstore/postgres"
	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/lockstore"
)

// A Reserve that conflicts with a row committed after its statement began
// (so its snapshot cannot see the holder) still reports the holder: here
// another session's insert is in flight when Reserve starts, Reserve waits
// on it, and it commits.
func TestReserveSeesHolderCommittedDuringItsStatement(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn := pgtest.DSN(t)
	pool := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "reserver"})
	s, err := postgres.New(ctx, pool, postgres.Config{})
	require.NoError(t, err)
	other := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "other"})

	k := lockstore.Key{Namespace: "snap", ID: "v"}
	tx, err := other.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(ctx, `INSERT INTO claimbus.claim_reservation (namespace, id, owner, confirmed, at)
		VALUES ($1, $2, 'first', false, now())`, k.Namespace, k.ID)
	require.NoError(t, err)

	type result struct {
		held     claimstore.Reservation
		reserved bool
		err      error
	}
	done := make(chan result, 1)
	go func() {
		held, reserved, err := s.Reserve(ctx, k, "second", time.Hour)
		done <- result{held, reserved, err}
	}()
	// Reserve's statement has begun, and waits for the other session's row.
	require.Eventually(t, func() bool {
		var waiting bool
		err := other.QueryRow(ctx, `SELECT count(*) > 0 FROM pg_stat_activity
			WHERE application_name = 'reserver' AND wait_event_type = 'Lock'`).Scan(&waiting)
		require.NoError(t, err)
		return waiting
	}, 10*time.Second, time.Millisecond)
	require.NoError(t, tx.Commit(ctx))

	r := <-done
	require.NoError(t, r.err)
	require.False(t, r.reserved, "the committed pending reservation is younger than maxLag")
	require.Equal(t, "first", r.held.Owner)
	require.False(t, r.held.Confirmed)
	require.Equal(t, k, r.held.Key)
}
