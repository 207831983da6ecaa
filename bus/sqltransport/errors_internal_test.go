package sqltransport

import (
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/middleware"
)

// retryable is a connection error that says whether the statement was sent
// (pgconn's SafeToRetry).
type retryable struct {
	error
	safe bool
}

func (e retryable) SafeToRetry() bool { return e.safe }
func (e retryable) Unwrap() error     { return e.error }

// An insert whose connection broke after it was sent may have committed:
// unavailable, with its outcome unknown. One that failed before it was
// sent is unavailable only; another error is left as it is.
func TestInsertUnavailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sent := insertUnavailable(ctx, fmt.Errorf("could not insert message as row: %w", retryable{io.ErrUnexpectedEOF, false}))
	require.ErrorIs(t, sent, middleware.ErrUnavailable)
	require.ErrorIs(t, sent, middleware.ErrOutcomeUnknown)

	unsent := insertUnavailable(ctx, fmt.Errorf("could not insert message as row: %w", retryable{io.ErrUnexpectedEOF, true}))
	require.ErrorIs(t, unsent, middleware.ErrUnavailable)
	require.NotErrorIs(t, unsent, middleware.ErrOutcomeUnknown)

	other := fmt.Errorf("syntax error")
	require.Equal(t, other, insertUnavailable(ctx, other))
	require.NoError(t, insertUnavailable(ctx, nil))
}
