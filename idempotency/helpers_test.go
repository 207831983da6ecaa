package idempotency_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/claimstore"
	"github.com/claimbus/claimbus/idempotency"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/lockstoretest"
	"github.com/claimbus/claimbus/middleware"
)

// Pay is the idempotent command of the tests: Key is its idempotency key,
// set by the client.
type Pay struct {
	Key    string
	Amount int
	// Fail, when set, makes the handler fail: "error" with a plain error,
	// any other value with a rejection of that code.
	Fail string
}

// Receipt is the result of Pay: Run counts the handler's runs.
type Receipt struct {
	Amount int
	Run    int64
}

// payKey is the KeyFunc of the tests: Pay's Key field.
func payKey(p *middleware.Pipeline) string {
	if c, ok := p.Command.(*Pay); ok {
		return c.Key
	}
	return ""
}

// env is the shared state of the nodes of one test: one Locker, one Store,
// one clock for the Store, and the handler's run counter.
type env struct {
	t *testing.T
	// locker is the Locker of the nodes: mem, unless a test gives another.
	locker lockstore.Locker
	mem    *lockstore.Memory
	clock  *lockstoretest.Clock
	store  claimstore.Store
	runs   atomic.Int64
	// gate, when set, is called by the handler before it answers.
	gate func(ctx context.Context, c *Pay) error
}

func newEnv(t *testing.T) *env {
	t.Helper()
	locker, err := lockstore.NewMemory(lockstore.MemoryConfig{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, locker.Close()) })
	clock := lockstoretest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	return &env{t: t, locker: locker, mem: locker, clock: clock, store: claimstore.NewMemory(claimstore.MemoryConfig{Now: clock.Now})}
}

// config is the middleware's configuration on e, with payKey.
func (e *env) config() idempotency.Config {
	return idempotency.Config{Locker: e.locker, Store: e.store, Retention: time.Hour, Key: payKey}
}

// middleware returns the idempotency middleware for cfg.
func (e *env) middleware(cfg idempotency.Config) *idempotency.Middleware {
	e.t.Helper()
	m, err := idempotency.New(cfg)
	require.NoError(e.t, err)
	return m
}

// handle is the handler of Pay: it counts its runs.
func (e *env) handle(ctx context.Context, c *Pay) (Receipt, error) {
	n := e.runs.Add(1)
	if e.gate != nil {
		if err := e.gate(ctx, c); err != nil {
			return Receipt{}, err
		}
	}
	switch c.Fail {
	case "":
		return Receipt{Amount: c.Amount, Run: n}, nil
	case "error":
		return Receipt{}, errors.New("payment provider down")
	default:
		return Receipt{}, middleware.Reject(c.Fail, "amount", "refused by rule %s", c.Fail)
	}
}

// node returns a started bus on cfg (in process when it has no transport)
// handling Pay with e.handle behind mws, closed when the test ends.
func (e *env) node(cfg bus.Config, mws ...middleware.Middleware) *bus.Bus {
	e.t.Helper()
	cfg.Middleware = mws
	cfg.HandlerConcurrency = 128
	b, err := bus.New(cfg)
	require.NoError(e.t, err)
	require.NoError(e.t, bus.Handle(b, e.handle))
	require.NoError(e.t, b.Start(context.Background()))
	e.t.Cleanup(func() { require.NoError(e.t, b.Close()) })
	return b
}

// pay dispatches c on b.
func pay(t *testing.T, b *bus.Bus, c Pay) (Receipt, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return bus.Dispatch[Receipt](ctx, b, &c)
}

// payKeyOf is the lock and outcome key of a Pay with key id.
func payKeyOf(id string) lockstore.Key {
	return lockstore.Key{Namespace: idempotency.DefaultNamespace + ".idempotency_test.Pay", ID: id}
}

// transports are the ways the round-trip tests run a bus.
var transports = []struct {
	name string
	cfg  func(t *testing.T) bus.Config
}{
	{"in-process", func(*testing.T) bus.Config { return bus.Config{} }},
	{"gochannel", func(t *testing.T) bus.Config {
		ps := gochannel.NewGoChannel(gochannel.Config{}, nil)
		t.Cleanup(func() { require.NoError(t, ps.Close()) })
		return bus.Config{Publisher: ps, Subscriber: ps}
	}},
}

// counter is a middleware that counts its hook calls.
type counter struct {
	before, after atomic.Int64
}

func (c *counter) BeforeDispatch(context.Context, *middleware.Pipeline) { c.before.Add(1) }
func (c *counter) AfterDispatch(context.Context, *middleware.Pipeline)  { c.after.Add(1) }
func (c *counter) AfterFailure(context.Context, *middleware.Pipeline)   { c.after.Add(1) }

// faultyStore is an Outcomes whose methods fail while their error is set.
type faultyStore struct {
	claimstore.Outcomes
	mu                     sync.Mutex
	outcomeErr, saveErr    error
	saves, lookups, purges int
}

func (f *faultyStore) Outcome(ctx context.Context, key lockstore.Key) (claimstore.Outcome, bool, error) {
	f.mu.Lock()
	err := f.outcomeErr
	f.lookups++
	f.mu.Unlock()
	if err != nil {
		return claimstore.Outcome{}, false, err
	}
	return f.Outcomes.Outcome(ctx, key)
}

func (f *faultyStore) SaveOutcome(ctx context.Context, key lockstore.Key, o claimstore.Outcome, retention time.Duration) error {
	f.mu.Lock()
	err := f.saveErr
	f.saves++
	f.mu.Unlock()
	if err != nil {
		return err
	}
	return f.Outcomes.SaveOutcome(ctx, key, o, retention)
}

func (f *faultyStore) PurgeOutcomes(ctx context.Context, limit int) (int, error) {
	f.mu.Lock()
	f.purges++
	f.mu.Unlock()
	return f.Outcomes.PurgeOutcomes(ctx, limit)
}

func (f *faultyStore) counts() (lookups, saves, purges int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lookups, f.saves, f.purges
}

// marshal returns the JSON a bus would send for res.
func marshal(res any) (string, error) {
	b, err := json.Marshal(res)
	return string(b), err
}

// requireRunsAgain pays Pay{Key: "k", Amount: 5} on b, whose first run
// stored nothing (why says why), and checks that the handler ran a second
// time; it returns the answer.
func requireRunsAgain(t *testing.T, b *bus.Bus, why string) Receipt {
	t.Helper()
	r, err := pay(t, b, Pay{Key: "k", Amount: 5})
	require.NoError(t, err, "%s: the retry runs again", why)
	require.Equal(t, Receipt{Amount: 5, Run: 2}, r, "%s: the retry runs again", why)
	return r
}

// countingLocker counts the calls that reach the database through a
// Locker: each TryLock, Lock and Release is one statement of the
// PostgreSQL store.
type countingLocker struct {
	lockstore.Locker
	calls atomic.Int64
}

func (c *countingLocker) TryLock(ctx context.Context, key lockstore.Key) (lockstore.Lock, error) {
	return c.count(c.Locker.TryLock(ctx, key))
}

func (c *countingLocker) Lock(ctx context.Context, key lockstore.Key) (lockstore.Lock, error) {
	return c.count(c.Locker.Lock(ctx, key))
}

// count counts a lock call that returned lk, err, and wraps lk so that its
// Release is counted.
func (c *countingLocker) count(lk lockstore.Lock, err error) (lockstore.Lock, error) {
	c.calls.Add(1)
	if err != nil {
		return nil, err
	}
	return &countingLock{Lock: lk, calls: &c.calls}, nil
}

type countingLock struct {
	lockstore.Lock
	calls *atomic.Int64
}

func (l *countingLock) Release(ctx context.Context) error {
	l.calls.Add(1)
	return l.Lock.Release(ctx)
}
