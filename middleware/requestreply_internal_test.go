package middleware

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/ThreeDotsLabs/watermill/components/requestreply"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
)

type testResult struct {
	ID string `json:"id"`
}

// TestAnswerSkipsSendersThatDoNotWait: a command sent without
// requestreply has no operation id and gets no reply.
func TestAnswerSkipsSendersThatDoNotWait(t *testing.T) {
	t.Parallel()
	backend := &countingBackend{}
	fn := newRequestReply[testResult](backend).answer
	require.NoError(t, fn(context.Background(), message.NewMessage("c1", nil), nil, ErrLocked))
	require.NoError(t, fn(context.Background(), nil, nil, ErrLocked))
	require.Zero(t, backend.calls)

	msg := message.NewMessage("c2", nil)
	msg.Metadata.Set(requestreply.OperationIDMetadataKey, "op-1")
	require.NoError(t, fn(context.Background(), msg, testResult{ID: "s"}, ErrLocked))
	require.Equal(t, 1, backend.calls)
	require.Equal(t, testResult{ID: "s"}, backend.last.HandlerResult)
	require.ErrorIs(t, backend.last.HandleErr, ErrLocked)

	backend.fail = errors.New("broker down")
	err := fn(context.Background(), msg, nil, ErrLocked)
	require.ErrorIs(t, err, backend.fail)
	require.ErrorContains(t, err, "c2")
}

// countingBackend is a requestreply.Backend that records what it answers.
type countingBackend struct {
	calls int
	last  requestreply.BackendOnCommandProcessedParams[testResult]
	fail  error
}

func (b *countingBackend) ListenForNotifications(context.Context, requestreply.BackendListenForNotificationsParams) (<-chan requestreply.Reply[testResult], error) {
	return nil, errors.New("not used")
}

func (b *countingBackend) OnCommandProcessed(_ context.Context, params requestreply.BackendOnCommandProcessedParams[testResult]) error {
	b.calls++
	b.last = params
	if b.fail != nil {
		return b.fail
	}
	// Like the PubSubBackend without AckCommandErrors.
	return params.HandleErr
}

// A repeat answered from an idempotency store carries the first run's
// result as JSON: the sender gets it decoded, or an error saying it does
// not decode.
func TestAnswerDecodesAStoredResult(t *testing.T) {
	t.Parallel()
	backend := &countingBackend{}
	rr := newRequestReply[testResult](backend)
	msg := message.NewMessage("c1", nil)
	msg.Metadata.Set(requestreply.OperationIDMetadataKey, "op-1")
	require.NoError(t, rr.answer(context.Background(), msg, json.RawMessage(`{"id":"s1"}`), nil))
	require.Equal(t, testResult{ID: "s1"}, backend.last.HandlerResult)
	require.NoError(t, backend.last.HandleErr)

	require.NoError(t, rr.answer(context.Background(), msg, json.RawMessage(`[1]`), nil))
	require.Zero(t, backend.last.HandlerResult)
	require.ErrorContains(t, backend.last.HandleErr, "does not decode")
}
