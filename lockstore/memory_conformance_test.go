package lockstore_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/lockstoretest"
)

// epoch is where the fake clocks of the tests start.
var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// newMemory returns a store configured by cfg, closed when t ends.
func newMemory(t testing.TB, cfg lockstore.MemoryConfig) *lockstore.Memory {
	t.Helper()
	m, err := lockstore.NewMemory(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, m.Close()) })
	return m
}

func TestMemoryConformance(t *testing.T) {
	t.Parallel()
	lockstoretest.Run(t, func(t *testing.T) lockstore.Store {
		return newMemory(t, lockstore.MemoryConfig{})
	})
}

// With one shard every key meets every other in the same map and mutex.
func TestMemoryConformanceOneShard(t *testing.T) {
	t.Parallel()
	lockstoretest.Run(t, func(t *testing.T) lockstore.Store {
		return newMemory(t, lockstore.MemoryConfig{Shards: 1})
	})
}

// A store with leases must still pass the whole suite while no lease runs
// out.
func TestMemoryConformanceWithTTL(t *testing.T) {
	t.Parallel()
	lockstoretest.Run(t, func(t *testing.T) lockstore.Store {
		return newMemory(t, lockstore.MemoryConfig{TTL: time.Hour, Clock: lockstoretest.NewClock(epoch)})
	})
}

func TestMemoryLeases(t *testing.T) {
	t.Parallel()
	lockstoretest.RunLeases(t, func(t *testing.T, ttl time.Duration) lockstoretest.LeaseStore {
		clock := lockstoretest.NewClock(epoch)
		return lockstoretest.LeaseStore{
			Store:   newMemory(t, lockstore.MemoryConfig{TTL: ttl, Clock: clock}),
			Advance: clock.Advance,
		}
	})
}
