package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/claimstore"
	"github.com/claimbus/claimbus/idempotency"
	"github.com/claimbus/claimbus/internal/wire"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/middleware"
	"github.com/claimbus/claimbus/uniqueness"
)

// haltingMiddleware builds each middleware that halts a command when its
// lock store fails: Lock, uniqueness and idempotency.
var haltingMiddleware = []struct {
	name string
	new  func(t *testing.T, locker lockstore.Locker) middleware.Middleware
}{
	{"Lock", func(t *testing.T, locker lockstore.Locker) middleware.Middleware {
		m, err := middleware.Lock(middleware.LockConfig{Locker: locker, Keys: transferKeys, Logger: discardLogger})
		require.NoError(t, err)
		return m
	}},
	{"uniqueness", func(t *testing.T, locker lockstore.Locker) middleware.Middleware {
		m, err := uniqueness.New(uniqueness.Config{
			Locker: locker, ClaimTimeout: time.Second, Logger: discardLogger,
			Rules: []uniqueness.Rule{uniqueness.Field(uniqueness.Names{Field: "id", Scope: "transfer.id"},
				func(c *Transfer) string { return c.ID },
				func(context.Context, string) (bool, error) { return false, nil })},
		})
		require.NoError(t, err)
		return m
	}},
	{"idempotency", func(t *testing.T, locker lockstore.Locker) middleware.Middleware {
		m, err := idempotency.New(idempotency.Config{
			Locker: locker, Store: claimstore.NewMemory(claimstore.MemoryConfig{}), Retention: time.Hour,
			LockTimeout: time.Second, Logger: discardLogger,
			Key: func(p *middleware.Pipeline) string { return p.Command.(*Transfer).ID },
		})
		require.NoError(t, err)
		return m
	}},
}

// One error family: whichever middleware halts a command because its lock
// store failed, the halt has the code of the one table (RejectStoreError),
// wraps the store's error, matches lockstore's sentinel of its code exactly
// when it matches middleware's, and crosses the wire as the rejection
// alone, which still matches its code's sentinel.
func TestStoreErrorHaltsAreOneFamily(t *testing.T) {
	t.Parallel()
	dial := errors.New("dial tcp 10.1.2.3:5432: connection refused")
	cases := []struct {
		name string
		err  error
		want error // the rejection sentinel of the code
	}{
		{"locked", lockstore.ErrLocked, middleware.ErrLocked},
		{"locked with detail", fmt.Errorf("%w: transfer/t1 (held on this node)", lockstore.ErrLocked), middleware.ErrLocked},
		{"store timeout", fmt.Errorf("%w: %w", lockstore.ErrTimeout, dial), middleware.ErrTimeout},
		{"deadline", fmt.Errorf("lock wait: %w", context.DeadlineExceeded), middleware.ErrTimeout},
		{"lock store unavailable", fmt.Errorf("%w: %w", lockstore.ErrUnavailable, dial), middleware.ErrUnavailable},
		{"claim store unavailable", fmt.Errorf("%w: %w", claimstore.ErrUnavailable, dial), middleware.ErrUnavailable},
		{"capacity", lockstore.ErrCapacity, middleware.ErrUnavailable},
		{"closed", lockstore.ErrClosed, middleware.ErrUnavailable},
		{"other", dial, middleware.ErrUnavailable},
		{"invalid key", fmt.Errorf("%w: id is 300 bytes", lockstore.ErrInvalidKey), middleware.ErrInvalid},
	}
	pairs := []struct{ store, rejection error }{
		{lockstore.ErrLocked, middleware.ErrLocked},
		{lockstore.ErrTimeout, middleware.ErrTimeout},
		{lockstore.ErrUnavailable, middleware.ErrUnavailable},
	}
	for _, hm := range haltingMiddleware {
		for _, tc := range cases {
			t.Run(hm.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				store := newMemory(t, lockstore.MemoryConfig{})
				r := newRunner(t, hm.new(t, failingLocker{Locker: store, err: tc.err}))
				ran, err := run(context.Background(), r, &Transfer{ID: "t1"}, nil)
				require.False(t, ran, "the handler ran")
				require.ErrorIs(t, err, tc.want)
				require.ErrorIs(t, err, tc.err, "the store's error is wrapped")
				var rej *middleware.Rejection
				require.ErrorAs(t, err, &rej)
				require.Equal(t, storeCode(tc.err), rej.Code, "the one table's code")
				for _, p := range pairs {
					require.Equal(t, errors.Is(err, p.rejection), errors.Is(err, p.store),
						"errors.Is(err, %v) and errors.Is(err, %v) disagree: %v", p.store, p.rejection, err)
				}

				back := wire.UnmarshalError(wire.MarshalError(err))
				require.Equal(t, rej, back, "only the rejection crosses the wire")
				require.ErrorIs(t, back, tc.want, "a rejection without its cause still matches its code")
				require.NotContains(t, back.Error(), "10.1.2.3")
			})
		}
	}
}

func TestRejectStoreErrorCode(t *testing.T) {
	t.Parallel()
	for err, want := range map[error]string{
		lockstore.ErrLocked:                          middleware.CodeLocked,
		fmt.Errorf("x: %w", lockstore.ErrInvalidKey): middleware.CodeInvalid,
		fmt.Errorf("%w: %w", claimstore.ErrInvalid, fmt.Errorf("%w: empty id", lockstore.ErrInvalidKey)): middleware.CodeInvalid,
		lockstore.ErrTimeout:      middleware.CodeTimeout,
		context.DeadlineExceeded:  middleware.CodeTimeout,
		lockstore.ErrUnavailable:  middleware.CodeUnavailable,
		claimstore.ErrUnavailable: middleware.CodeUnavailable,
		lockstore.ErrCapacity:     middleware.CodeUnavailable,
		lockstore.ErrClosed:       middleware.CodeUnavailable,
		errors.New("disk full"):   middleware.CodeUnavailable,
	} {
		require.Equal(t, want, storeCode(err), "%v", err)
	}
}

// msg is a message function that says text whatever the code.
func msg(text string) func(string) string { return func(string) string { return text } }

// RejectStoreError's text is the rejection's and the cause's, for the logs;
// a bare lockstore sentinel adds nothing and is left out.
func TestRejectStoreErrorText(t *testing.T) {
	t.Parallel()
	err := middleware.RejectStoreError(lockstore.ErrLocked, "", msg("transfer/t1 is locked"))
	require.EqualError(t, err, "locked: transfer/t1 is locked")
	err = middleware.RejectStoreError(fmt.Errorf("%w: held on node 2", lockstore.ErrLocked), "id", msg("t1 is locked"))
	require.EqualError(t, err, "locked: id: t1 is locked: lockstore: locked: held on node 2")
}

// RejectStoreError asks for the message of the error's code, once, and
// names the field; the halt matches the code's sentinel and the cause.
func TestRejectStoreErrorMessage(t *testing.T) {
	t.Parallel()
	cause := fmt.Errorf("%w: node 2", lockstore.ErrTimeout)
	var codes []string
	err := middleware.RejectStoreError(cause, "email", func(code string) string {
		codes = append(codes, code)
		return "waited too long for email"
	})
	require.Equal(t, []string{middleware.CodeTimeout}, codes)
	require.EqualError(t, err, "timeout: email: waited too long for email: lockstore: lock wait timed out: node 2")
	var rej *middleware.Rejection
	require.ErrorAs(t, err, &rej)
	require.Equal(t, "email", rej.Field)
	require.ErrorIs(t, err, middleware.ErrTimeout)
	require.ErrorIs(t, err, cause)
}

// storeCode returns the code of the rejection RejectStoreError makes of err.
func storeCode(err error) string {
	var rej *middleware.Rejection
	if !errors.As(middleware.RejectStoreError(err, "", msg("x")), &rej) {
		return ""
	}
	return rej.Code
}
