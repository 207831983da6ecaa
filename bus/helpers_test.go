package bus_test

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/bus/bustest"
)

// Commands of the tests.
type (
	Echo  struct{ Text string }
	Block struct{ ID int }
	// Orphan has no handler.
	Orphan struct{}
)

// newGoChannel returns a GoChannel closed when the test ends.
func newGoChannel(t testing.TB) *gochannel.GoChannel {
	ps := gochannel.NewGoChannel(gochannel.Config{}, nil)
	t.Cleanup(func() { require.NoError(t, ps.Close()) })
	return ps
}

// startBus returns a started bus for cfg with the handlers reg registers,
// closed when the test ends.
func startBus(t testing.TB, cfg bus.Config, reg func(b *bus.Bus)) *bus.Bus {
	t.Helper()
	return bustest.StartBus(t, cfg, reg)
}

// eventually polls cond until it holds or a deadline passes.
func eventually(t testing.TB, cond func() bool, msg string) {
	t.Helper()
	require.Eventually(t, cond, 10*time.Second, time.Millisecond, msg)
}
