package lockstore

import (
	"context"

	"github.com/claimbus/claimbus/lockstore/internal/effects"
)

// AfterCommit runs f once the outermost transaction that ctx is inside (one
// opened by a store's Serialize) has committed and its lock is released.
// When that transaction rolls back, f never runs; nor does it when f was
// registered inside a nested Serialize that rolled back to its savepoint.
// Outside any transaction, f runs at once. Use it for effects that must not
// be seen before the data is: publishing an event, notifying a socket,
// starting a job.
func AfterCommit(ctx context.Context, f func()) {
	effects.Register(ctx, f)
}
