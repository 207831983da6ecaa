package transport_test

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/bus/internal/transport"
)

func TestBusConfigSetsTheEndpointsAndKeepsTheRest(t *testing.T) {
	t.Parallel()
	logger := watermill.NopLogger{}
	pub := gochannel.NewGoChannel(gochannel.Config{}, logger)
	commands := gochannel.NewGoChannel(gochannel.Config{}, logger)
	replies := gochannel.NewGoChannel(gochannel.Config{}, logger)
	t.Cleanup(func() {
		for _, c := range []*gochannel.GoChannel{pub, commands, replies} {
			require.NoError(t, c.Close())
		}
	})

	cfg := transport.BusConfig(bus.Config{HandlerConcurrency: 3}, pub, commands, replies, "node-1")
	require.Same(t, pub, cfg.Publisher)
	require.Same(t, pub, cfg.ReplyPublisher)
	require.Same(t, commands, cfg.Subscriber)
	require.Same(t, replies, cfg.ReplySubscriber)
	require.Equal(t, "node-1", cfg.NodeID)
	require.Equal(t, 3, cfg.HandlerConcurrency)
}
