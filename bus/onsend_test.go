package bus_test

import (
	"context"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/middleware"
)

type traceKey struct{}

// TestOnSend checks that metadata OnSend writes from the sender's ctx
// reaches the middleware of the handling bus, in process and over a
// transport, for Dispatch and for a command a handler dispatches.
func TestOnSend(t *testing.T) {
	t.Parallel()
	for _, transport := range []string{"in-process", "gochannel"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			seen := make(chan string, 2)
			cfg := bus.Config{
				OnSend: func(ctx context.Context, msg *message.Message) {
					if v, ok := ctx.Value(traceKey{}).(string); ok {
						msg.Metadata.Set("trace", v)
					}
				},
				Middleware: []middleware.Middleware{middleware.Hooks{OnBeforeDispatch: func(_ context.Context, p *middleware.Pipeline) {
					seen <- p.Metadata["trace"]
				}}},
			}
			if transport == "gochannel" {
				ps := newGoChannel(t)
				cfg.Publisher, cfg.Subscriber = ps, ps
			}
			type Inner struct{}
			b := startBus(t, cfg, func(b *bus.Bus) {
				require.NoError(t, bus.Handle(b, func(ctx context.Context, c *BenchCmd) (string, error) {
					return bus.Dispatch[string](context.WithValue(ctx, traceKey{}, "from-handler"), b, &Inner{})
				}))
				require.NoError(t, bus.Handle(b, func(context.Context, *Inner) (string, error) { return "inner", nil }))
			})
			got, err := bus.Dispatch[string](context.WithValue(t.Context(), traceKey{}, "from-caller"), b, &BenchCmd{})
			require.NoError(t, err)
			require.Equal(t, "inner", got)
			require.Equal(t, "from-caller", <-seen)
			require.Equal(t, "from-handler", <-seen)
		})
	}
}
