package middleware_test

import (
	"context"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/middleware"
)

// An OnHandle the processor already had (tracing, say) and claimbus's
// OnHandle, chained: both run, the existing one outermost, the context it
// passes on reaches the pipeline and the handler, and a halted command
// still halts.
func TestChainOnHandle(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var order []string
	note := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, s)
	}
	existing := func(params cqrs.CommandProcessorOnHandleParams) error {
		note("existing before")
		ctx := context.WithValue(params.Message.Context(), ctxKey("span"), "span-1")
		err := params.Handler.Handle(ctx, params.Command)
		note("existing after")
		return err
	}
	runner := newRunner(t, middleware.Hooks{
		OnBeforeDispatch: func(_ context.Context, p *middleware.Pipeline) {
			note("pipeline span=" + p.Context().Value(ctxKey("span")).(string))
		},
	}, takenEmails)
	handler := cqrs.NewCommandHandler("create_staff", func(ctx context.Context, cmd *CreateStaff) error {
		note("handled " + cmd.Email + " span=" + ctx.Value(ctxKey("span")).(string))
		return nil
	})
	claimbus, err := middleware.OnHandle(middleware.HandlerConfig{Runner: runner, Handlers: []cqrs.CommandHandler{handler}})
	require.NoError(t, err)
	env := startCQRS(t, handler, middleware.ChainOnHandle(existing, nil, claimbus))

	publishAcked(t, env.pubSub, "commands", commandMessage(t, &CreateStaff{Email: "ann@x.org"}))
	publishAcked(t, env.pubSub, "commands", commandMessage(t, &CreateStaff{Email: "taken@x.org"}))
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{
		"existing before", "pipeline span=span-1", "handled ann@x.org span=span-1", "existing after",
		"existing before", "pipeline span=span-1", "existing after",
	}, order, "the taken email is halted by the pipeline inside the existing OnHandle")
}

// With no function, the chain calls the handler.
func TestChainOnHandleEmpty(t *testing.T) {
	t.Parallel()
	var handled []string
	handler := cqrs.NewCommandHandler("create_staff", func(_ context.Context, cmd *CreateStaff) error {
		handled = append(handled, cmd.Email)
		return nil
	})
	env := startCQRS(t, handler, middleware.ChainOnHandle())
	publishAcked(t, env.pubSub, "commands", commandMessage(t, &CreateStaff{Email: "ann@x.org"}))
	require.Equal(t, []string{"ann@x.org"}, handled)
}
