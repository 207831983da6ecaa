package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/wire"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/middleware"
)

// failingLocker fails every TryLock and Lock with err.
type failingLocker struct {
	lockstore.Locker
	err error
}

func (l failingLocker) TryLock(context.Context, lockstore.Key) (lockstore.Lock, error) {
	return nil, l.err
}

func (l failingLocker) Lock(context.Context, lockstore.Key) (lockstore.Lock, error) {
	return nil, l.err
}

// A rejection built from a lock store's error says what failed in words
// for people, and that a retry may work, without the store's error (which
// can name a server, a port, a user): that stays in the error chain, for
// errors.Is and the logs, and never crosses the wire.
func TestLockRejectionKeepsStoreErrorsOut(t *testing.T) {
	t.Parallel()
	dial := errors.New("lock connection 3: dial tcp 10.1.2.3:5432: connect: connection refused (user=app database=prod)")
	tests := []struct {
		name string
		err  error
		want error
		msg  string
	}{
		{"unavailable", fmt.Errorf("%w: %w", lockstore.ErrUnavailable, dial), middleware.ErrUnavailable, "cannot lock transfer/t1 now, try again"},
		{"other failure", dial, middleware.ErrUnavailable, "cannot lock transfer/t1 now, try again"},
		{"server-side timeout", fmt.Errorf("%w: %w", lockstore.ErrTimeout, dial), middleware.ErrTimeout, "transfer/t1 stayed locked past the lock store's timeout, try again"},
		{"invalid key", fmt.Errorf("%w: id \"t1\" is 300 bytes", lockstore.ErrInvalidKey), middleware.ErrInvalid, "transfer/t1 cannot be locked: its id is empty, too long or not UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			store := newMemory(t, lockstore.MemoryConfig{})
			r := lockRunner(t, middleware.LockConfig{Locker: failingLocker{Locker: store, err: tt.err}})
			ran, err := run(context.Background(), r, &Transfer{ID: "t1"}, nil)
			require.False(t, ran)
			require.ErrorIs(t, err, tt.want)
			require.ErrorIs(t, err, tt.err, "the store's error stays in the chain")
			var rej *middleware.Rejection
			require.ErrorAs(t, err, &rej)
			require.Equal(t, tt.msg, rej.Message)
			back := wire.UnmarshalError(wire.MarshalError(err))
			require.Equal(t, rej, back, "only the rejection crosses the wire")
			require.NotContains(t, fmt.Sprint(back), "10.1.2.3")
		})
	}
}
