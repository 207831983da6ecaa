package bus_test

import (
	"testing"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/bus/bustest"
)

// The bus in process, with no Publisher, keeps the contract of every
// transport.
func TestConformanceInProcess(t *testing.T) {
	t.Parallel()
	bustest.Run(t, bustest.Harness{NewBackend: func(testing.TB) bustest.Backend {
		return bustest.Backend{Node: func(_ testing.TB, cfg bus.Config, _ bustest.NodeOptions) bus.Config { return cfg }}
	}})
}

// A GoChannel shared by the nodes of a test keeps it too (one node sends,
// another handles: a GoChannel has no competing consumers).
func TestConformanceGoChannel(t *testing.T) {
	t.Parallel()
	bustest.Run(t, bustest.Harness{NewBackend: func(t testing.TB) bustest.Backend {
		ps := newGoChannel(t)
		return bustest.Backend{Node: func(_ testing.TB, cfg bus.Config, _ bustest.NodeOptions) bus.Config {
			cfg.Publisher, cfg.Subscriber = ps, ps
			return cfg
		}}
	}})
}
