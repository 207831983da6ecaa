package postgres

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/lockext"
	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/lockstoretest"
)

// TestProbeFaultsKeepOtherLocks: a probe that is slow (pg_sleep past the
// round trip's deadline) or fails (on the server, or with a row that does
// not scan: a NULL) fails its own TryLockProbe and leaves its key free, and never
// ends the other locks held on the same lock connection: another key's
// lock stays held, its Lost still open, and the connection is not
// reconnected.
func TestProbeFaultsKeepOtherLocks(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.Pool(t, pgtest.PoolConfig{MaxConns: 2})
	_, err := pool.Exec(ctx, `CREATE TABLE staff (email text PRIMARY KEY); INSERT INTO staff VALUES ('taken@x.org')`)
	require.NoError(t, err)
	s := newTestStore(t, pool, Config{LockConns: 1})

	other, err := s.TryLock(ctx, lockstore.Key{Namespace: "probe", ID: "other"})
	require.NoError(t, err)
	pid := connPIDs(s)[0]

	for _, tc := range []struct{ name, sql string }{
		{"slow", `SELECT email FROM staff WHERE email = ANY($1) AND pg_sleep(5) IS NOT NULL`},
		{"server error", `SELECT email FROM no_such_table WHERE email = ANY($1)`},
		{"division by zero", `SELECT email FROM staff WHERE email = ANY($1) AND 1/0 = 1`},
		{"null", `SELECT NULL::text FROM staff WHERE email = ANY($1)`},
	} {
		key := lockstore.Key{Namespace: "probe", ID: tc.name}
		start := time.Now()
		lk, _, err := s.TryLockProbe(ctx, key, lockext.Probe{SQL: tc.sql, Value: "taken@x.org"})
		require.Error(t, err, tc.name)
		require.Nil(t, lk, tc.name)
		require.Less(t, time.Since(start), s.cfg.LeaseBound, "%s: the probe was ended within the round trip's deadline", tc.name)
		select {
		case <-other.Lost():
			t.Fatalf("%s: the probe ended the other lock on its connection: %v", tc.name, err)
		default:
		}
		require.Equal(t, pid, connPIDs(s)[0], "%s: the lock connection was not replaced", tc.name)

		// The probe's key is free again, and the connection answers probes.
		lockstoretest.WaitTakeable(t, s, key)
		lk, found, err := s.TryLockProbe(ctx, key, lockext.Probe{SQL: `SELECT email FROM staff WHERE email = ANY($1)`, Value: "taken@x.org"})
		require.NoError(t, err, tc.name)
		require.True(t, found.Taken, tc.name)
		require.NoError(t, lk.Release(ctx), tc.name)
	}

	// Good probes and failing ones sharing round trips: each answers for
	// itself.
	for round := range 5 {
		var wg sync.WaitGroup
		errs := make([]error, 16)
		for i := range errs {
			wg.Go(func() {
				key := lockstore.Key{Namespace: "probe", ID: fmt.Sprint("mixed", round, i)}
				probe := lockext.Probe{SQL: `SELECT email FROM staff WHERE email = ANY($1)`, Value: "taken@x.org"}
				if i%2 == 1 {
					probe.SQL = `SELECT email FROM staff WHERE email = ANY($1) AND 1/0 = 1`
				}
				lk, found, err := s.TryLockProbe(ctx, key, probe)
				if err == nil {
					if !found.Taken {
						err = errors.New("the probe did not find the value")
					}
					err = errors.Join(err, lk.Release(ctx))
				}
				errs[i] = err
			})
		}
		wg.Wait()
		for i, err := range errs {
			if i%2 == 0 {
				require.NoError(t, err, "a good probe beside failing ones")
			} else {
				require.Error(t, err)
			}
		}
	}

	select {
	case <-other.Lost():
		t.Fatal("the other lock was lost")
	default:
	}
	require.NoError(t, other.Release(ctx), "the other lock was held throughout")
}
