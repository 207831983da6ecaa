// Package app is the example service of claimbus: staff sign-up, wallet
// transfers and a word-guessing lobby, each command sent through a bus whose
// middleware takes claims and locks, on an embedded SQLite database or on
// PostgreSQL shared by several nodes. The example_app command runs it as a
// demo and as an HTTP service; package test runs several nodes of it.
//
// It shows three patterns:
//
//   - Staff sign-up (staff.go): CreateStaff goes through Validate and the
//     Uniqueness middleware, which claims the normalised email and looks it
//     up in the staff table while holding the claim; a taken one is
//     already_taken. The insert commits before the claim is released, and
//     a unique index stays as the backstop (Node.BackstopViolations counts
//     the times it fired: never, while the claims work).
//   - Wallet transfers (wallet.go): the Lock middleware takes one lock per
//     transfer id, so an approve and a cancel of one transfer never run
//     together; the second is locked.
//   - Lobby guesses (lobby.go): GuessWord runs its read-modify-write in
//     Serialize on the lobby, so each word has exactly one winner.
//
// With Config.StaffModel StaffEvents, CreateStaff appends a StaffRegistered
// event and a projection applies it to the staff read model
// Config.ProjectionLag later; the lookup reads the lagging read model, so
// each email is reserved until the read model shows it. CreateStaff runs
// in one transaction (txcommand) that commits the event, the reservation
// and the IdempotencyKey's outcome together. In the table model a
// CreateStaff with an IdempotencyKey goes through the idempotency
// middleware before the claims. example_app/README.md describes both.
//
// A Node is a bus with the handlers, over a Backend: SQLiteBackend for the
// embedded demo, PostgresBackend for nodes sharing a database. New creates
// the schema, which is safe when nodes start at once; Handler serves the
// HTTP API.
package app
