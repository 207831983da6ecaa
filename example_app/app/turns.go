package app

import (
	"context"
	"time"

	"github.com/claimbus/claimbus/middleware"
)

// On SQLite one connection writes at a time: the node's writes take turns
// at the database's write gate (sqlite.Begin without keys), first come
// first served, instead of polling in SQLite's busy handler. Past its
// write capacity the queue grows, so each write waits only as long as its
// request can afford:
//
//   - a command's writes wait for their turn until its claim wait has
//     passed since it began, and no later than a grace before its
//     deadline; a write whose turn did not come fails busy, answered 503
//     with Retry-After;
//   - a sign-up's request is bounded by its claim wait and the grace, so
//     that a wait for a free handler of the bus, or for a claim, that
//     runs past it is answered 504 then.
//
// Every sign-up is thus answered within its claim wait and a tenth.

// writesByKey is the context key of the time by which the writes under a
// context must have had their turn at the database (withWritesBy). The
// handler's ctx cannot say it with a deadline: a handler that started
// runs to its end (bus), so its ctx has none; only the hooks' ctx has the
// sender's.
type writesByKey struct{}

// withWritesBy returns ctx carrying t: the SQLite backend's writes under
// it wait for their turn until t, no longer.
func withWritesBy(ctx context.Context, t time.Time) context.Context {
	return context.WithValue(ctx, writesByKey{}, t)
}

// writesBy returns the time ctx carries from withWritesBy.
func writesBy(ctx context.Context) (time.Time, bool) {
	t, ok := ctx.Value(writesByKey{}).(time.Time)
	return t, ok
}

// boundTurns bounds the turns of the writes on b, the node's SQLite
// backend, by claimWait (see above): it sets b's wait for writes outside
// any command and n's sign-up timeout, and returns the hook that gives
// each command its time.
func (n *Node) boundTurns(claimWait time.Duration, b *sqliteBackend) func(context.Context, *middleware.Pipeline) {
	// The grace lets the last write admitted commit, or a busy write's
	// failure come back, before the sender stops waiting.
	grace := claimWait / 10
	b.turnWait = claimWait
	n.signUpTimeout = min(n.requestTimeout, claimWait+grace)
	return func(ctx context.Context, p *middleware.Pipeline) {
		by := time.Now().Add(claimWait)
		if d, ok := ctx.Deadline(); ok && d.Add(-grace).Before(by) {
			by = d.Add(-grace)
		}
		p.SetContext(withWritesBy(p.Context(), by))
	}
}
