package natstransport_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/bus/bustest"
	"github.com/claimbus/claimbus/bus/natstransport"
	"github.com/claimbus/claimbus/internal/natstest"
)

// harness runs the nodes of each test on a NATS server of its own, with
// the stream on disk or in memory. The transport is no bus.LossNotifier.
func harness(memory bool) bustest.Harness {
	return bustest.Harness{
		MultiNode:  true,
		Durable:    true,
		Redelivery: true,
		Inspects:   true,
		NewBackend: func(t testing.TB) bustest.Backend {
			srv := natstest.Start(t)
			in := inspect(t, srv.URL())
			var mu sync.Mutex
			var first *natstransport.Transport // names the stream and subjects
			return bustest.Backend{
				Node: func(t testing.TB, cfg bus.Config, o bustest.NodeOptions) bus.Config {
					tr := newTransport(t, srv.URL(), o.ID, natstransport.Config{MemoryStorage: memory, AckWait: o.RedeliverAfter})
					mu.Lock()
					if first == nil {
						first = tr
					}
					mu.Unlock()
					return tr.BusConfig(cfg)
				},
				// A work queue: an acked message is deleted from the stream.
				Unacked: func(t testing.TB, topic string) int {
					mu.Lock()
					defer mu.Unlock()
					return in.stored(first, topic)
				},
			}
		},
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	for _, memory := range []bool{false, true} {
		t.Run(fmt.Sprintf("memory=%v", memory), func(t *testing.T) {
			t.Parallel()
			bustest.Run(t, harness(memory))
		})
	}
}
