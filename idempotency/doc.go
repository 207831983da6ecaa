// Package idempotency runs a command carrying an idempotency key once, and
// answers every repeat of it, concurrent or later, on any node, with the
// stored outcome of the first run: its result, or its rejection.
//
// A command's key is Config.Key of its pipeline: by default its UUID, which
// every redelivery of one message shares; a client that retries a request
// sends a new message, so give such commands a key the client sets (a
// command field, an Idempotency-Key header) with a KeyFunc. A command
// whose KeyFunc returns "" passes through.
//
// # Contract
//
// With every node sharing one Locker (lockstore/postgres on one database)
// and one Store (claimstore/postgres), for as long as a key's outcome is
// retained (Config.Retention from the first run's end):
//   - A key runs its handler once when its first run succeeds or is
//     rejected; every repeat gets that answer: the same result, decoded by
//     bus.Dispatch as the first, with no error; or the same rejection
//     (errors.Is and errors.As hold as they did for the first sender).
//   - A repeat that arrives while the first run runs waits for it, on any
//     node (the key's lock, up to Config.LockTimeout or its context), and
//     then gets its answer. A repeat never runs the pipeline's later hooks
//     nor the handler.
//   - A repeat whose payload differs from the first's (Config.Fingerprint)
//     is rejected with middleware.CodeIdempotencyConflict, and changes
//     nothing: the first's outcome stays the answer.
//   - Transient failures are not stored: a plain handler error, a panic, a
//     done context, and the rejections that say "try again" (unavailable,
//     timeout, locked). The retry runs again. Every other rejection
//     (already_taken, invalid, idempotency_conflict, the application's
//     codes) is a final answer and is stored.
//
// Under faults:
//   - A node that dies, or loses the key's lock (a lease ran out, a lock
//     connection broke), before its outcome is stored leaves nothing
//     stored: the next repeat runs again. A lost lock cancels the
//     handler's context, with ErrLockLost as its cause, so the handler
//     stops before it writes when it can; between the loss and that stop, a
//     repeat on another node may take the key and run too. So commands are run at least
//     once, not exactly once: a handler that committed its work and whose
//     node then died before the outcome was stored runs again. Make the
//     handler's own write idempotent too (a unique index on the key) when
//     that must never happen.
//   - An outcome that cannot be stored (the store fails) is logged at
//     Error; the sender still gets its answer, and a repeat runs again.
//   - A store that cannot be read halts the command with
//     middleware.CodeUnavailable: the sender may try again.
//
// Retention is measured by the Store's clock. Past it a key runs again.
// Expired outcomes are never answered; Purge (or RunPurger, on a goroutine
// the application owns) deletes them. Nothing purges on its own.
//
// # Wiring
//
// Place the middleware before the Uniqueness middleware (and any other
// that claims, locks or checks): a repeat is then answered from the store
// before uniqueness claims its values, which would find them taken by the
// first run itself and answer already_taken; and the key's lock is always
// taken before the claims, in one order on every node, so the two never
// deadlock.
//
//	idem, err := idempotency.New(idempotency.Config{
//		Locker:    locks,    // shared by every node
//		Store:     outcomes, // shared by every node
//		Retention: 24 * time.Hour,
//		Key: func(p *middleware.Pipeline) string {
//			if c, ok := p.Command.(*commands.CreateStaff); ok {
//				return c.RequestID
//			}
//			return "" // not idempotent
//		},
//	})
//	...
//	b, err := bus.New(bus.Config{Middleware: []middleware.Middleware{idem, unique}})
//
// # Cost
//
// A command with a new key costs four calls to the backends: the lock,
// the store's read, its write, and the unlock; a repeat three: the lock,
// the read, the unlock (BenchmarkPostgres counts them). With
// Config.ReadFirst a repeat costs one read and no lock call, and a new key
// five calls (a read before the lock). On
// lockstore/postgres a lock and an unlock are a round trip each on a
// shared lock connection, and on a database store the read and the write
// one statement each.
package idempotency
