// Package app is the example service of claimbus: staff sign-up, wallet
// transfers and a word-guessing lobby, each command sent through a bus whose
// middleware takes claims and locks, on an embedded SQLite database or on
// PostgreSQL shared by several nodes.
//
// The example_app command runs it as a demo (SQLite) and as an HTTP
// service (PostgreSQL); the end-to-end tests in package test run several
// nodes of it on one database.
//
// # The three patterns
//
//   - Staff sign-up (staff.go): CreateStaff goes through Validate and the
//     Uniqueness middleware, which claims the normalised email, looks it up
//     in the staff table while holding the claim, and rejects a taken one
//     as already_taken naming the field "email". The handler's insert
//     commits before the claim is released; a unique index stays as the
//     backstop (Node.BackstopViolations counts the times it fired, as
//     /healthz reports: never, while the claims work). A sign-up sent
//     again with the same staff_id and address is a replay: answered 200
//     with the member stored, or 409 conflicting_replay when its name
//     differs.
//   - Wallet transfers (wallet.go): OpenTransfer, ApproveTransfer and
//     CancelTransfer go through the Lock middleware, one lock per transfer
//     id: an approve and a cancel of one transfer never run together, the
//     second gets a locked rejection. Balances move by atomic writes (a
//     debit only where the balance covers it).
//   - Lobby guesses (lobby.go): GuessWord runs its read-modify-write in
//     Serialize on the lobby (pg_advisory_xact_lock on PostgreSQL,
//     BEGIN IMMEDIATE behind an in-process lock on SQLite), so each word has
//     exactly one winner.
//
// # The events staff model
//
// With Config.StaffModel StaffEvents, CreateStaff appends a StaffRegistered
// event to the append-only staff_event table and publishes it on an
// in-process GoChannel; a Watermill cqrs EventProcessor applies it to the
// staff table, the read model, Config.ProjectionLag later. The claims'
// lookup reads the read model, which lags, so each email is reserved
// (uniqueness.Reserve, in the backend's claimstore) until the read model
// shows it; Config.DisableReservations turns that off and lets duplicates
// through, which the read model's unique index counts. Each node projects
// the events its own handlers appended: every event is applied once per
// database however many nodes share it; an event whose node dies before
// projecting it is applied by the catch-up of the next node to start, and
// until then its confirmed reservation keeps the email taken (no
// duplicate). GET /staff reads the read model, so it lags
// too.
//
// # Idempotency-Key
//
// In both models a CreateStaff with an IdempotencyKey (POST /staff's
// Idempotency-Key header) goes through the idempotency middleware before
// the claims: every repeat gets the first answer, one with another payload
// idempotency_conflict.
//
// # Nodes
//
// A Node is a bus with the handlers, over a Backend: SQLiteBackend for the
// embedded demo, PostgresBackend for nodes sharing a database (give their
// postgres.Store Namespaces()). New creates the schema (Migrate), which is
// safe when nodes start at once; Handler serves the HTTP API.
package app
