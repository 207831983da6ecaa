package lockstore

import (
	"context"

	"github.com/claimbus/claimbus/lockstore/internal/effects"
)

// TokenFrom returns the fencing token of the innermost lock the code
// running with ctx holds (a backend's Serialize or Exclusive), and false
// when ctx carries none. The token is strictly greater than every earlier
// token for that key, so a resource that remembers the highest token it
// has seen can refuse a stale holder's writes: pass it along and write
// only when it is not lower, for example
//
//	UPDATE job SET state = $1, token = $2 WHERE id = $3 AND token <= $2
//
// which changes no row once a later holder has written.
func TokenFrom(ctx context.Context) (int64, bool) {
	return effects.Token(ctx)
}
