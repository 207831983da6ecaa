package natstransport_test

import (
	"sync"
	"testing"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/bus/bustest"
	"github.com/claimbus/claimbus/bus/internal/crashtest"
	"github.com/claimbus/claimbus/bus/natstransport"
	"github.com/claimbus/claimbus/internal/natstest"
)

// The suite, with the stream on disk and in memory. The transport is no
// bus.LossNotifier: TestServerStopAndRestart shows what a sender sees when
// NATS goes away.
func TestConformance(t *testing.T) {
	t.Parallel()
	t.Run("file", func(t *testing.T) { t.Parallel(); runConformance(t, false) })
	t.Run("memory", func(t *testing.T) { t.Parallel(); runConformance(t, true) })
}

func runConformance(t *testing.T, memory bool) {
	bustest.Run(t, bustest.Harness{MultiNode: true, Durable: true, Redelivery: true, Inspects: true,
		NewBackend: func(t testing.TB) bustest.Backend {
			srv := natstest.Start(t)
			nb := &natsBackend{url: srv.URL(), memory: memory, in: inspect(t, srv.URL()), dialers: map[string]*crashtest.Dialer{}}
			return bustest.Backend{Node: nb.node, Crash: nb.crash, Unacked: nb.unacked}
		}})
}

// natsBackend is the NATS server of one check and the transports on it.
type natsBackend struct {
	url    string
	memory bool
	in     *inspector

	mu      sync.Mutex
	first   *natstransport.Transport     // names the stream and the subjects
	dialers map[string]*crashtest.Dialer // by node id
}

func (nb *natsBackend) node(t testing.TB, cfg bus.Config, o bustest.NodeOptions) bus.Config {
	tcfg, dialer := crashable(natstransport.Config{MemoryStorage: nb.memory, AckWait: o.RedeliverAfter})
	tr := newTransport(t, nb.url, o.ID, tcfg)
	nb.mu.Lock()
	defer nb.mu.Unlock()
	if nb.first == nil {
		nb.first = tr
	}
	nb.dialers[o.ID] = dialer
	return tr.BusConfig(cfg)
}

// crash cuts node id's connection: a node renews what it holds, so only
// a dead one has its commands delivered again.
func (nb *natsBackend) crash(_ testing.TB, id string) {
	nb.mu.Lock()
	defer nb.mu.Unlock()
	nb.dialers[id].Crash()
}

// unacked counts what the stream holds of topic: a work queue deletes an
// acked message.
func (nb *natsBackend) unacked(t testing.TB, topic string) int {
	nb.mu.Lock()
	defer nb.mu.Unlock()
	return nb.in.stored(nb.first, topic)
}
