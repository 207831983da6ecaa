package idempotency_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
)

// A run whose lock is lost while its handler runs (a store reset here)
// stores nothing, even when its handler finishes anyway: the run that took
// the key next stored its answer, and every repeat gets that one.
func TestLostLockRunDoesNotStoreOverTheNextRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	started, second := make(chan struct{}), make(chan struct{})
	e.gate = func(ctx context.Context, c *Pay) error {
		if e.runs.Load() > 1 {
			return nil
		}
		close(started)
		<-ctx.Done() // the lock is lost
		<-second     // the handler finishes anyway (it had committed)
		return nil
	}
	b := e.node(bus.Config{}, e.middleware(e.config()))
	type out struct {
		r   Receipt
		err error
	}
	first := make(chan out, 1)
	go func() { r, err := pay(t, b, Pay{Key: "k", Amount: 5}); first <- out{r, err} }()
	<-started
	require.NoError(t, e.mem.Reset(context.Background()))
	r2, err := pay(t, b, Pay{Key: "k", Amount: 5})
	require.NoError(t, err)
	close(second)
	o1 := <-first
	r3, err := pay(t, b, Pay{Key: "k", Amount: 5})
	require.NoError(t, err)
	_ = o1
	require.Equal(t, r2, r3, "a repeat gets the stored answer of the run that stored first")
}
