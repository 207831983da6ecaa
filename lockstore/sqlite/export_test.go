package sqlite

import (
	"context"
	"database/sql"

	"github.com/claimbus/claimbus/lockstore"
)

// ShrinkTokenBlock makes s reserve its fencing tokens n at a time, and
// shrinks the block it holds to the next n tokens, so that a test sees
// reservations. Handing out fewer of the reserved tokens is always safe.
func ShrinkTokenBlock(s *Store, n int64) {
	ts := s.tokens
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.block = n
	ts.limit = min(ts.limit, ts.next+n)
}

// SerializeValue and ExclusiveValue are Store.Serialize and
// Store.Exclusive for a fn that returns a value, as the tests use them.
func SerializeValue[T any](ctx context.Context, s *Store, key lockstore.Key, fn func(ctx context.Context, tx *sql.Tx) (T, error)) (T, error) {
	return runSerialize(ctx, s, key, fn)
}

func ExclusiveValue[T any](ctx context.Context, s *Store, key lockstore.Key, fn func(ctx context.Context, q Querier) (T, error)) (T, error) {
	return runExclusive(ctx, s, key, fn)
}

// Reset ends every lock held now, as lockstore.Memory.Reset does.
func (s *Store) Reset(ctx context.Context) error { return s.mem.Reset(ctx) }
