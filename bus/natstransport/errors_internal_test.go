package natstransport

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/middleware"
)

// A deadline is an outage only when it is not the caller's own.
func TestUnavailableDeadline(t *testing.T) {
	t.Parallel()
	live := context.Background()
	done, cancel := context.WithTimeout(context.Background(), 0)
	defer cancel()
	<-done.Done()
	timedOut := fmt.Errorf("request: %w", context.DeadlineExceeded)

	require.ErrorIs(t, wrap(live, "create stream", timedOut), middleware.ErrUnavailable, "the RequestTimeout ran out: NATS did not answer")
	require.NotErrorIs(t, wrap(done, "create stream", timedOut), middleware.ErrUnavailable, "the caller's own deadline")
	require.ErrorIs(t, wrap(done, "create stream", nats.ErrNoResponders), middleware.ErrUnavailable, "NATS said so, whatever the caller's ctx")
	require.False(t, unavailable(live, errors.New("bad subject")))
}
