package sqlitegate

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// connector is a database/sql connector that never connects: the gate
// needs a handle, not a database.
type connector struct{}

func (connector) Connect(context.Context) (driver.Conn, error) { return nil, errors.New("no database") }
func (connector) Driver() driver.Driver                        { return nil }

func openDB(t *testing.T) *sql.DB {
	t.Helper()
	db := sql.OpenDB(connector{})
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	return db
}

// waitQueued waits until n writers wait at g.
func waitQueued(t *testing.T, g *Gate, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return g.Waiting() == n }, 10*time.Second, time.Millisecond)
}

func TestForIsOneGatePerHandle(t *testing.T) {
	t.Parallel()
	a, b := openDB(t), openDB(t)
	g := For(a)
	require.Same(t, g, For(a))
	require.NotSame(t, g, For(b))
}

// Writers take their turns in the order they came.
func TestWritersTakeTurnsInOrder(t *testing.T) {
	t.Parallel()
	g := For(openDB(t))
	ctx := t.Context()
	first, err := g.Enter(ctx)
	require.NoError(t, err)
	const writers = 20
	order := make(chan int, writers)
	for i := range writers {
		go func() {
			turn, err := g.Enter(ctx)
			if err != nil {
				order <- -1
				return
			}
			order <- i
			turn.Leave()
		}()
		waitQueued(t, g, i+1) // the next one comes after this one
	}
	first.Leave()
	for i := range writers {
		require.Equal(t, i, <-order)
	}
}

// A writer whose ctx ends while it waits leaves the queue, and the
// writers behind it keep their place.
func TestWaitEndsWithContext(t *testing.T) {
	t.Parallel()
	g := For(openDB(t))
	holder, err := g.Enter(t.Context())
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	_, err = g.Enter(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Zero(t, g.Waiting())

	next := make(chan error, 1)
	go func() {
		turn, err := g.Enter(t.Context())
		if err == nil {
			turn.Leave()
		}
		next <- err
	}()
	waitQueued(t, g, 1)
	holder.Leave()
	holder.Leave() // a second Leave passes nothing on
	require.NoError(t, <-next)
	turn, err := g.Enter(t.Context())
	require.NoError(t, err, "the gate is free again")
	turn.Leave()
}

// A ctx inside a turn cannot enter the same gate (it would wait for
// itself) until the turn ends; another gate it can.
func TestEnterInsideOwnTurnFails(t *testing.T) {
	t.Parallel()
	g, other := For(openDB(t)), For(openDB(t))
	turn, err := g.Enter(t.Context())
	require.NoError(t, err)
	inside := turn.Context(t.Context())

	o, err := other.Enter(inside)
	require.NoError(t, err)
	both := o.Context(inside)
	_, err = g.Enter(both)
	require.ErrorIs(t, err, ErrHeld, "the outer turn is found through the inner one")
	o.Leave()

	_, err = g.Enter(inside)
	require.ErrorIs(t, err, ErrHeld)
	turn.Leave()
	again, err := g.Enter(inside)
	require.NoError(t, err, "once the turn ended, its ctx enters as any")
	again.Leave()
}

// A handle's gate goes once the handle is garbage.
func TestGateGoesWithItsHandle(t *testing.T) {
	count := func() int {
		gates.Lock()
		defer gates.Unlock()
		return len(gates.m)
	}
	db := sql.OpenDB(connector{})
	For(db)
	before := count()
	require.NoError(t, db.Close())
	db = nil //nolint:wastedassign // drop the last reference
	require.Eventually(t, func() bool {
		runtime.GC()
		return count() < before
	}, 10*time.Second, 10*time.Millisecond)
}
