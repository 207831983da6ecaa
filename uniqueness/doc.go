// Package uniqueness claims values, such as an email address, so that two
// commands can never both take one: claims (a lock per value, FIFO
// waiters, a lookup run while the lock is held)
// and the Uniqueness middleware that puts them in front of a command
// handler.
//
// # READ THIS FIRST: which lookups are safe, and when to reserve
//
// A claim is only as good as its lookup. Without reservations, the
// guarantee "one staff per email" holds when, and only when:
//
//   - the lookup reads what the handler writes, in the same strongly
//     consistent store (the table the handler inserts into, in the same
//     database, on the primary);
//   - the handler's write has committed before the claim is released (the
//     middleware releases in its after hooks, which run once the handler
//     has returned: commit inside the handler, not in an outer transaction
//     that commits later).
//
// A lookup that reads anything that lags behind the write (a projection
// fed by events, an asynchronous replica, a cache, a search index) lets a
// duplicate through without reservations: the next claimant's lookup does
// not see the value yet and finds it free. Such rules need Reserve.
//
// With Reserve(store, maxLag), a value is taken when the lookup finds it or
// a reservation holds it, so the lookup may lag, by up to maxLag:
//
//   - under the claim, before the handler runs, the value is reserved
//     (pending, owned by the command); once the handler succeeds it is
//     confirmed, and a confirmed reservation keeps the value taken until
//     the lookup shows it; when the handler fails it is cancelled
//     (AfterFailure) and the value is free at once. A handler that commits
//     and can fail afterwards (publishing its event) calls Committed right
//     after its commit, which confirms at once;
//   - AfterDispatch starts the confirmation and returns without waiting for
//     it: the claim is released and the sender answered meanwhile. Until it
//     lands the reservation is pending, owned by a command that succeeded,
//     so the value is taken all the same (the next claimant finds it held,
//     the claimants queued behind the claim fail at once). The middleware
//     owns the confirmations under way, each bounded by
//     middleware.DefaultReleaseTimeout, and logs those that fail; Flush
//     waits for them, as a process shutting down does;
//   - a pending reservation whose owner is gone (a node that crashed, a
//     claim whose lock was lost, between the handler's commit and the
//     confirmation, including after the answer and before the confirmation
//     landed) is in doubt: its value stays taken until the lookup shows it
//     (then taken for good) or maxLag passes without it appearing (then
//     free). So a crash never produces a duplicate, provided the write shows
//     within maxLag, and never blocks a value forever;
//   - a reservation is dropped once the lookup shows its value, at the next
//     claim of the value and by the sweeper (Sweep, RunSweeper), which runs
//     on one node at a time: the store holds only values in flight or not
//     yet shown. Free frees a value (a deleted account, a changed email);
//   - claimants queued behind a holder that succeeded fail at once with
//     already_taken, as they do when the lookup sees the value.
//
// The store is a claimstore backend shared by every node: claimstore/postgres
// on the database the Locker uses, claimstore/sqlite for one host, or the
// memory store for one process. A claim with a reservation costs a
// reservation write before the handler and a confirmation after it, which
// the answer does not wait for.
//
// A redelivered command (the same command id) finds its own earlier
// reservation and runs again on it, whether the first run confirmed it or
// not; a failure of the redelivery never cancels that reservation, since
// the first run may have written the value: a pending one stays in doubt
// for maxLag, a confirmed one stays until the lookup shows the value.
//
// Keep a unique index on the column of the read model all the same, as the
// last line of defence: the claims make it never fire, and it catches
// whatever bypasses them (a migration, a script, a bug).
//
// # The Uniqueness middleware
//
// New returns a middleware.Middleware configured with rules, one per
// command type and unique field, made with Field:
//
//	mw, err := uniqueness.New(uniqueness.Config{
//		Locker: store, // lockstore.NewMemory, lockstore/postgres, lockstore/sqlite
//		Rules: []uniqueness.Rule{
//			uniqueness.Field(uniqueness.Names{Field: "email", Scope: "staff.email"},
//				func(c *commands.CreateStaff) string { return c.Email },
//				staffEmailTaken, // func(ctx, email string) (bool, error)
//				uniqueness.Normalize(uniqueness.NormalizeEmail),
//				uniqueness.AlreadyDone(func(ctx context.Context, c *commands.CreateStaff, email string) (bool, error) {
//					id, err := staffIDWithEmail(ctx, email)
//					return id == c.StaffID, err
//				})),
//		},
//	})
//
// Its BeforeDispatch claims every unique field of the command, all or
// nothing, in the Locker's key order (so that two commands sharing two
// values never deadlock, on any node), and keeps the claims in the
// pipeline (AssignClaims, ClaimsOf). A taken value halts the command with
// a rejection matching middleware.ErrAlreadyTaken that names the field,
// never the value; the sender gets it back as data, on any node. A wait
// longer than ClaimTimeout halts with a timeout rejection, a failed lookup
// or lock store with unavailable, after releasing what was claimed. While
// the handler runs, a lost claim cancels the handler's context (cause
// ErrClaimLost) at once: the lock's store reports the loss where it ends
// the lock (lockstore.AfterLost; no goroutine or timer per command), and a
// store that cannot is watched by one goroutine per claim. AfterDispatch and
// AfterFailure release the claims, with the re-check that fails the waiters
// fast once the value exists. An uncontended release does not wait for
// the lock store to confirm it (lockstore.ReleaseLater): the PostgreSQL
// store carries the unlock in its next round trip, within a millisecond,
// and the key stays held until then. A release that fails is logged with
// the command id and the key (Config.Logger), at Error when the claim's
// lock was lost while the command ran (lockstore.ErrLockLost), and passed
// to Config.OnReleaseError, possibly after the command has returned.
//
// # Round trips
//
// On the PostgreSQL store an uncontended claim with Probe costs one round
// trip for the lock and the lookup together, and its release rides the
// next round trip of the lock connection: with the handler's insert, two
// round trips per command where a bare insert costs one. Without Probe the
// lookup is a round trip of its own (Batched shares it among concurrent
// claims). A claim that waits for its key, and the re-check of a contended
// release, run the rule's LookupFunc.
//
// # Rules that cannot miss
//
// A rule that never matches a command would let every command through with
// no claim, silently. So:
//
//   - a rule matches the commands as the pipeline carries them. Commands
//     arrive as pointers (*commands.CreateStaff); a rule written for the
//     struct type (func(c commands.CreateStaff) string) matches them too,
//     dereferenced, as well as commands given as values;
//   - a rule whose command type the pipeline never carries is an error
//     where the pipeline's commands are known: bus.Bus.Start fails when no
//     handler registered with bus.Handle takes the type, and
//     middleware.RouterMiddleware fails when its Registry holds no such
//     type, both with an error matching middleware.ErrUnhandledCommandType
//     that names the rule (the Middleware is a middleware.CommandTyper).
//     middleware.OnHandle and middleware.WrapHandler see no list of
//     commands and cannot check.
//
// WriteBack stores the normalised value a rule claimed in the command
// before its handler runs, so that the handler writes exactly what was
// claimed and what the lookup will find ("ann@x.org", not " Ann@X.org"):
//
//	uniqueness.Field(uniqueness.Names{Field: "email", Scope: "staff.email"},
//		func(c *commands.CreateStaff) string { return c.Email },
//		staffEmailTaken,
//		uniqueness.Normalize(uniqueness.NormalizeEmail),
//		uniqueness.WriteBack(func(c *commands.CreateStaff, v string) { c.Email = v }))
//
// WriteBack needs a rule for a pointer type: a rule for a value type gets
// a copy of the command, and Config.Validate refuses WriteBack on it.
//
// A rule's scope is the lock namespace: rules naming the same scope
// compete for the same values, across command types, so a CreateStaff and
// a ChangeStaffEmail cannot both take one address.
//
// With at-least-once delivery a command may arrive again after its write
// committed. A rule's AlreadyDone recognises that write as the command's
// own: the redelivery halts with no error (done) instead of already_taken.
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
// value and process plus one re-check per contended release. Batched
// makes concurrent lookups share one query.
//
// Claimants on other nodes are kept apart by the Locker (the PostgreSQL
// store coordinates every node sharing a database) and run their own
// lookups.
//
// ErrAlreadyTaken is middleware.ErrAlreadyTaken: errors.Is matches it
// against the structured already_taken rejection a sender gets back.
package uniqueness
