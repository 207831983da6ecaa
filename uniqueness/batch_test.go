package uniqueness_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/middleware"
	"github.com/claimbus/claimbus/uniqueness"
)

func TestBatchedErrorsAndPanics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	boom := errors.New("database down")
	var mode atomic.Value
	f := uniqueness.Batched(func(_ context.Context, values []string) ([]bool, error) {
		switch mode.Load() {
		case "error":
			return nil, boom
		case "panic":
			panic("batch exploded")
		case "short":
			return nil, nil
		}
		return make([]bool, len(values)), nil
	})

	mode.Store("error")
	_, err := f(ctx, "a@x.org")
	require.ErrorIs(t, err, boom)
	mode.Store("panic")
	_, err = f(ctx, "a@x.org")
	var perr *middleware.PanicError
	require.ErrorAs(t, err, &perr)
	mode.Store("short")
	_, err = f(ctx, "a@x.org")
	require.ErrorContains(t, err, "answered 0")
	mode.Store("ok")
	taken, err := f(ctx, "a@x.org")
	require.NoError(t, err, "a failed call leaves the batcher ready for the next")
	require.False(t, taken)
}

// Under a storm of concurrent lookups, every answer is right and calls are
// fewer than lookups.
func TestBatchedStorm(t *testing.T) {
	t.Parallel()
	const lookups = 500
	var calls, entered atomic.Int64
	allIn := make(chan struct{})
	f := uniqueness.Batched(func(_ context.Context, values []string) ([]bool, error) {
		if calls.Add(1) == 1 {
			<-allIn // the first query is in flight until every lookup has started
		}
		out := make([]bool, len(values))
		for i, v := range values {
			out[i] = len(v)%2 == 0
		}
		return out, nil
	})
	ctx := context.Background()
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range lookups {
		v := fmt.Sprintf("user%d@x.org", i)
		wg.Go(func() {
			<-start
			if entered.Add(1) == lookups {
				close(allIn)
			}
			taken, err := f(ctx, v)
			if assertNoErr(t, err) && taken != (len(v)%2 == 0) {
				t.Errorf("%s: taken=%v", v, taken)
			}
		})
	}
	close(start)
	wg.Wait()
	require.Less(t, calls.Load(), int64(lookups/2), "concurrent lookups must share calls")
}

func assertNoErr(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Errorf("unexpected error: %v", err)
		return false
	}
	return true
}
