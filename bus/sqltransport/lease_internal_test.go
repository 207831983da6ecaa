package sqltransport

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/pgtest"
)

// leaseTopic is the topic of these tests; its table is claimbus_lease.
const leaseTopic = "lease"

// leaseNode is a transport of its own pool, closed when the test ends.
func leaseNode(t *testing.T, pool *pgxpool.Pool, id string, cfg Config) *Transport {
	t.Helper()
	cfg.NodeID = id
	tr, err := New(context.Background(), pool, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, tr.Close()) })
	return tr
}

// subscribeLease subscribes tr to leaseTopic, and returns the messages and
// the subscription.
func subscribeLease(t *testing.T, tr *Transport) (<-chan *message.Message, *subscription) {
	t.Helper()
	ch, err := tr.commands.Subscribe(context.Background(), leaseTopic)
	require.NoError(t, err)
	tr.commands.mu.Lock()
	defer tr.commands.mu.Unlock()
	return ch, tr.commands.subs[len(tr.commands.subs)-1]
}

// publishLease publishes one message per payload to leaseTopic.
func publishLease(t *testing.T, tr *Transport, payloads ...string) {
	t.Helper()
	msgs := make([]*message.Message, len(payloads))
	for i, p := range payloads {
		msgs[i] = message.NewMessage(watermill.NewUUID(), []byte(p))
	}
	require.NoError(t, tr.publisher.Publish(leaseTopic, msgs...))
}

// receive returns the next message of ch, within a bound.
func receive(t *testing.T, ch <-chan *message.Message) *message.Message {
	t.Helper()
	select {
	case m := <-ch:
		require.NotNil(t, m)
		return m
	case <-time.After(20 * time.Second):
		t.Fatal("no message within 20s")
		return nil
	}
}

// heldCount returns how many messages s holds.
func heldCount(s *subscription) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.held)
}

// leaseRow reports whether the row of payload exists, and whether it is
// leased.
func leaseRow(t *testing.T, db *pgxpool.Pool, payload string) (exists, leased bool) {
	t.Helper()
	var n, live int
	err := db.QueryRow(context.Background(), `SELECT count(*), count(*) FILTER (WHERE claimed_until > now()) FROM claimbus_lease WHERE payload = $1`,
		[]byte(payload)).Scan(&n, &live)
	require.NoError(t, err)
	return n > 0, live > 0
}

// lostLease is node 1 holding messages whose leases node 2 took over.
type lostLease struct {
	tr1     *Transport
	s1, s2  *subscription
	m1, m2  []*message.Message // as node 1 and node 2 got them
	db      *pgxpool.Pool      // inspects the table
	release func()             // gives node 1 its connection back
}

// leaseLost leaves node 1, whose pool has one connection, with payloads
// handed over to its consumer, while node 2 leases them: node 1's
// connection is taken (its renewals wait for it), the leases are made to
// end as they would after a lease of silence, and node 2 takes them.
func leaseLost(t *testing.T, payloads ...string) lostLease {
	t.Helper()
	dsn := pgtest.DSN(t)
	var x lostLease
	x.db = pgtest.Connect(t, dsn, pgtest.PoolConfig{ApplicationName: "inspector"})
	pool1 := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 1, ApplicationName: "node-1"})
	pool2 := pgtest.Connect(t, dsn, pgtest.PoolConfig{ApplicationName: "node-2"})
	x.tr1 = leaseNode(t, pool1, "node-1", Config{})
	tr2 := leaseNode(t, pool2, "node-2", Config{PollInterval: 10 * time.Millisecond})
	var ch1 <-chan *message.Message
	ch1, x.s1 = subscribeLease(t, x.tr1)
	publishLease(t, x.tr1, payloads...)
	for range payloads {
		x.m1 = append(x.m1, receive(t, ch1))
	}
	taken, err := pool1.Acquire(context.Background())
	require.NoError(t, err)
	x.release = sync.OnceFunc(taken.Release)
	t.Cleanup(x.release) // before the pool closes
	_, err = x.db.Exec(context.Background(), `UPDATE claimbus_lease SET claimed_until = now() - interval '1 second'`)
	require.NoError(t, err)
	var ch2 <-chan *message.Message
	ch2, x.s2 = subscribeLease(t, tr2)
	for range payloads {
		x.m2 = append(x.m2, receive(t, ch2))
	}
	for i := range payloads {
		require.Equal(t, x.m1[i].UUID, x.m2[i].UUID)
	}
	return x
}

// requireNode2Holds checks that the row of payload is leased to node 2.
func (x lostLease) requireNode2Holds(t *testing.T, payload string) {
	t.Helper()
	var by string
	var live bool
	err := x.db.QueryRow(context.Background(), `SELECT claimed_by, claimed_until > now() FROM claimbus_lease WHERE payload = $1`,
		[]byte(payload)).Scan(&by, &live)
	require.NoError(t, err, "%s: the row node 2 holds", payload)
	require.Equal(t, x.s2.token, by, "%s: claimed by node 2", payload)
	require.True(t, live, "%s: leased", payload)
}

// A node that lost its lease (another leased the message meanwhile) finds
// it lost at its next renewal, and renews it no more; its late ack does
// not delete the message the other node holds.
func TestLostLeaseIsNeitherRenewedNorAcked(t *testing.T) {
	t.Parallel()
	x := leaseLost(t, "m")
	x.release()
	eventually(t, func() bool { return heldCount(x.s1) == 0 }, "node 1 drops the lease it lost")
	x.requireNode2Holds(t, "m")
	x.m1[0].Ack()
	eventually(t, func() bool {
		x.s1.mu.Lock()
		defer x.s1.mu.Unlock()
		return len(x.s1.acked) == 0
	}, "node 1 settles its late ack")
	x.requireNode2Holds(t, "m")
	x.m2[0].Ack()
	eventually(t, func() bool { exists, _ := leaseRow(t, x.db, "m"); return !exists }, "node 2's ack")
}

// A node that lost its leases and ends (hands back what it holds, and
// deletes what it acked) leaves the messages another node leased since
// to that node.
func TestLostLeaseIsNotHandedBack(t *testing.T) {
	t.Parallel()
	x := leaseLost(t, "acked", "held")
	x.m1[0].Ack()
	x.s1.cancel()
	x.release()
	require.NoError(t, x.tr1.Close()) // waits for the subscription's end
	x.requireNode2Holds(t, "acked")
	x.requireNode2Holds(t, "held")
	for _, m := range x.m2 {
		m.Ack()
	}
	eventually(t, func() bool {
		acked, _ := leaseRow(t, x.db, "acked")
		held, _ := leaseRow(t, x.db, "held")
		return !acked && !held
	}, "node 2's acks")
}

// A nack settled in the flush that also renews the leases held hands the
// message back: the renewal leaves it alone.
func TestNackHandedBackDespiteRenewal(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	db := pgtest.Connect(t, dsn, pgtest.PoolConfig{ApplicationName: "inspector"})
	// No notification and a slow poll: the subscription does not take the
	// message again before the test looks at it.
	tr := leaseNode(t, pgtest.Connect(t, dsn, pgtest.PoolConfig{ApplicationName: "node"}), "node",
		Config{DisableNotify: true, PollInterval: time.Hour})
	publishLease(t, tr, "m") // before the subscription's first and only poll
	ch, s := subscribeLease(t, tr)
	receive(t, ch)
	// The nack is queued as its watcher would, without waking the
	// settling loop: the flush that takes it renews the leases.
	s.mu.Lock()
	for _, l := range s.held {
		s.queueLocked(l, false)
	}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s.flush(ctx, true)
	eventually(t, func() bool { return heldCount(s) == 0 }, "the hand-back") // by this flush or a renewal tick's
	exists, leased := leaseRow(t, db, "m")
	require.True(t, exists)
	require.False(t, leased, "handed back")
}

// eventually polls cond until it holds or a deadline passes.
func eventually(t *testing.T, cond func() bool, msg string) {
	t.Helper()
	require.Eventually(t, cond, 20*time.Second, 5*time.Millisecond, msg)
}
