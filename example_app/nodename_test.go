package main

import (
	"context"
	"database/sql"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/example_app/app"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/sqlite"
)

// testNode is an embedded node for the name watch's tests.
func testNode(t *testing.T) *app.Node {
	t.Helper()
	db, err := sql.Open("sqlite", sqlite.DSN(filepath.Join(t.TempDir(), "n.db"), 0))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	store, err := sqlite.New(context.Background(), db, sqlite.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	node, err := app.New(context.Background(), app.Config{Backend: app.SQLiteBackend(store)})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, node.Close()) })
	return node
}

// A lost name makes the node unavailable until it is retaken.
func TestNameHolderRetakes(t *testing.T) {
	t.Parallel()
	mem, err := lockstore.NewMemory(lockstore.MemoryConfig{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, mem.Close()) })
	key := lockstore.Key{Namespace: app.NamespaceNode, ID: "a"}
	l, err := mem.TryLock(context.Background(), key)
	require.NoError(t, err)
	node := testNode(t)
	// The first retake waits at a gate, so that the test sees the node
	// unavailable meanwhile.
	gated := &gatedLocker{Locker: mem, entered: make(chan struct{}), gate: make(chan struct{})}
	h := &nameHolder{store: gated, key: key, node: node, logger: slog.New(slog.DiscardHandler), lock: l}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.watch(ctx) }()

	require.NoError(t, mem.Reset(context.Background()))
	<-l.Lost()
	<-gated.entered
	require.Equal(t, app.ReasonNodeNameLost, node.Unavailable(), "the node stops taking commands while its name is lost")
	close(gated.gate)
	require.Eventually(t, func() bool {
		hs, err := mem.Held(context.Background())
		require.NoError(t, err)
		return len(hs) == 1 && hs[0].Token > l.Token() && node.Unavailable() == ""
	}, 10*time.Second, time.Millisecond, "the name is retaken and the node available again")
	cancel()
	require.NoError(t, <-done)
	require.NoError(t, h.release())
	hs, err := mem.Held(context.Background())
	require.NoError(t, err)
	require.Empty(t, hs)
}

// While the store is unavailable the node stays unavailable; when another
// live node took the name, watch returns the error serve exits 1 with.
func TestNameHolderTakenByAnother(t *testing.T) {
	t.Parallel()
	lost := make(chan struct{})
	fl := &fakeLocker{answers: []error{lockstore.ErrUnavailable, lockstore.ErrUnavailable, lockstore.ErrLocked}}
	node := testNode(t)
	h := &nameHolder{store: fl, key: lockstore.Key{Namespace: app.NamespaceNode, ID: "a"}, node: node, logger: slog.New(slog.DiscardHandler), lock: fakeLock{lost: lost}}
	done := make(chan error, 1)
	go func() { done <- h.watch(context.Background()) }()
	close(lost)
	err := <-done
	require.EqualError(t, err, `another live node is named "a" on this database: give each node its own -node`)
	require.Equal(t, app.ReasonNodeNameLost, node.Unavailable())
	require.Equal(t, 3, fl.calls())
	require.NoError(t, h.release(), "nothing held")
}

// gatedLocker holds its first TryLock at gate, after closing entered.
type gatedLocker struct {
	lockstore.Locker
	once          sync.Once
	entered, gate chan struct{}
}

func (g *gatedLocker) TryLock(ctx context.Context, key lockstore.Key) (lockstore.Lock, error) {
	g.once.Do(func() {
		close(g.entered)
		<-g.gate
	})
	return g.Locker.TryLock(ctx, key)
}

type fakeLocker struct {
	lockstore.Locker
	mu      sync.Mutex
	answers []error
	n       int
}

func (f *fakeLocker) TryLock(context.Context, lockstore.Key) (lockstore.Lock, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	err := f.answers[min(f.n, len(f.answers)-1)]
	f.n++
	return nil, err
}

func (f *fakeLocker) calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

type fakeLock struct {
	lockstore.Lock
	lost chan struct{}
}

func (l fakeLock) Lost() <-chan struct{}         { return l.lost }
func (l fakeLock) Release(context.Context) error { return lockstore.ErrLockLost }
