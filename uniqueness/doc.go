// Package uniqueness claims values, such as an email address, so that two
// commands can never both take one: claims (a lock per value, FIFO
// waiters, a lookup run while the lock is held) and the Uniqueness
// middleware that puts them in front of a command handler.
//
// A claim is only as good as its lookup: read "The lookup must see what
// the handler writes" in uniqueness/README.md before writing a rule. A
// lookup that lags (a projection, a replica) needs Reserve.
//
// New returns the middleware, with one rule per command type and unique
// field, made with Field:
//
//	mw, err := uniqueness.New(uniqueness.Config{
//		Locker: store, // lockstore.NewMemory, lockstore/postgres, lockstore/sqlite
//		Rules: []uniqueness.Rule{
//			uniqueness.Field(uniqueness.Names{Field: "email", Scope: "staff.email"},
//				func(c *commands.CreateStaff) string { return c.Email },
//				staffEmailTaken, // func(ctx, email string) (bool, error)
//				uniqueness.Normalize(uniqueness.NormalizeEmail)),
//		},
//	})
//
// BeforeDispatch claims every unique field of the command, all or nothing,
// in the Locker's key order, so two commands sharing two values never
// deadlock. A taken value halts the command with a rejection matching
// middleware.ErrAlreadyTaken that names the field; a wait longer than
// ClaimTimeout halts it with timeout, a failed lookup or store with
// unavailable. A claim lost while the handler runs cancels the handler's
// context with lockstore.ErrLockLost as its cause. AfterDispatch and AfterFailure
// release the claims; when the value now exists, the claimants queued
// behind fail at once without a lookup of their own.
//
// A rule whose command type no handler takes is an error at bus.Bus.Start,
// middleware.RouterMiddleware and middleware.OnHandle
// (middleware.ErrUnhandledCommandType),
// so a rule cannot silently match nothing.
package uniqueness
