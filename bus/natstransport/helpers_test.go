package natstransport_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/bus/bustest"
	"github.com/claimbus/claimbus/bus/natstransport"
)

// node is one bus on the NATS transport.
type node struct {
	tr  *natstransport.Transport
	bus *bus.Bus
}

// newTransport opens a transport for node id on the NATS server at url,
// closed when the test ends.
func newTransport(t testing.TB, url, id string, cfg natstransport.Config) *natstransport.Transport {
	t.Helper()
	cfg.NodeID = id
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := natstransport.New(ctx, url, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, tr.Close()) })
	return tr
}

// newNode starts a node on the NATS server at url; reg registers its
// handlers. Everything is closed when the test ends, the bus first.
func newNode(t testing.TB, url, id string, tcfg natstransport.Config, bcfg bus.Config, reg func(b *bus.Bus)) *node {
	t.Helper()
	tr := newTransport(t, url, id, tcfg)
	return &node{tr: tr, bus: bustest.StartBus(t, tr.BusConfig(bcfg), reg)}
}

// inspector reads the state of the stream and consumers of a transport,
// on a connection of its own.
type inspector struct {
	t  testing.TB
	js nats.JetStreamContext
}

func inspect(t testing.TB, url string) *inspector {
	t.Helper()
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := nc.JetStream(nats.MaxWait(5 * time.Second))
	require.NoError(t, err)
	return &inspector{t: t, js: js}
}

// unsettled returns the messages of topic's consumer not yet delivered
// plus those delivered and not acked: zero once every message of the
// topic is acked. The consumer must exist.
func (in *inspector) unsettled(tr *natstransport.Transport, topic string) int {
	in.t.Helper()
	info, err := in.js.ConsumerInfo(in.stream(tr, topic), natstransport.ConsumerName(tr, topic))
	require.NoError(in.t, err)
	return int(info.NumPending) + info.NumAckPending
}

// delivered returns how many deliveries topic's consumer made.
func (in *inspector) delivered(tr *natstransport.Transport, topic string) int {
	in.t.Helper()
	info, err := in.js.ConsumerInfo(in.stream(tr, topic), natstransport.ConsumerName(tr, topic))
	require.NoError(in.t, err)
	return int(info.Delivered.Consumer)
}

// stored returns how many messages the stream holds on topic's subject
// (a work queue: an acked message is deleted).
func (in *inspector) stored(tr *natstransport.Transport, topic string) int {
	in.t.Helper()
	subject := natstransport.Subject(tr, topic)
	info, err := in.js.StreamInfo(in.stream(tr, topic), &nats.StreamInfoRequest{SubjectsFilter: subject})
	require.NoError(in.t, err)
	return int(info.State.Subjects[subject])
}

// eventually polls cond until it holds or a deadline passes.
func eventually(t testing.TB, cond func() bool, msg string) {
	t.Helper()
	require.Eventually(t, cond, 20*time.Second, 5*time.Millisecond, msg)
}

// stream returns the name of the stream that captures topic's subject.
func (in *inspector) stream(tr *natstransport.Transport, topic string) string {
	in.t.Helper()
	name, err := in.js.StreamNameBySubject(natstransport.Subject(tr, topic))
	require.NoError(in.t, err)
	return name
}
