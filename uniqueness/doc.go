// Package uniqueness claims values, such as an email address, so that two
// commands can never both take one: the claims of seed 001 (a transaction
// handle per value, FIFO waiters, a lookup run while the handle is held)
// and the Uniqueness middleware that puts them in front of a command
// handler.
//
// # READ THIS FIRST: the lookup must see what the handler writes
//
// A claim is only as good as its lookup. The guarantee "one staff per
// email" holds when, and only when:
//
//   - the lookup reads what the handler writes, in the same strongly
//     consistent store (the table the handler inserts into, in the same
//     database, on the primary: never a cache, a search index, a replica or
//     a projection fed by events);
//   - the handler's write has committed before the claim is released (the
//     middleware releases in its after hooks, which run once the handler
//     has returned: commit inside the handler, not in an outer transaction
//     that commits later).
//
// A read model that lags behind the write (an eventually consistent
// projection, an asynchronous replica) lets a duplicate through: the next
// claimant's lookup does not see the row yet and finds the value free.
// Keep a unique index on the column all the same, as the last line of
// defence: the claims make it never fire, and it catches whatever bypasses
// them (a migration, a script, a bug).
//
// # Claims
//
// Claimer.Claim takes a key (namespace and value) on a lockstore.Locker,
// waiting first come first served behind the claimants ahead of it, and
// runs the lookup while it holds the key. When the lookup finds the value,
// Claim releases the key and returns ErrAlreadyTaken; otherwise the caller
// holds the claim, writes, commits, and calls Claim.Release:
//
//	cl, err := claimer.Claim(ctx, lockstore.Key{Namespace: "staff.email", ID: email}, func(ctx context.Context) (bool, error) {
//		return staffWithEmailExists(ctx, db, email)
//	})
//	if err != nil {
//		return err // errors.Is(err, uniqueness.ErrAlreadyTaken) when taken
//	}
//	defer cl.Release(context.WithoutCancel(ctx))
//	return insertStaff(ctx, db, email) // commits before Release
//
// Release runs the lookup again when claimants of this process wait for
// the key. If the value now exists, they all fail at once with
// ErrAlreadyTaken, none running its own lookup; otherwise, or when the
// re-check fails, the next one takes its turn and runs its own lookup. A
// claimant that finds the value taken while holding the key (at its claim
// or at its release) settles the key the same way for everyone queued
// behind it, which is also how a claim whose lock was lost (a lease that
// ran out) passes on: the next claimant's lookup decides for the queue.
//
// With nobody waiting in this process, Release skips the re-check: a
// claimant that arrives afterwards runs its own lookup. So an uncontended
// claim costs one lookup, and a storm of duplicates costs one lookup per
// value and process plus one re-check per contended release.
//
// Claimants on other nodes are kept apart by the Locker (the PostgreSQL
// store coordinates every node sharing a database) and run their own
// lookups.
//
// ErrAlreadyTaken is middleware.ErrAlreadyTaken: errors.Is matches it
// against the structured already_taken rejection a sender gets back.
package uniqueness
