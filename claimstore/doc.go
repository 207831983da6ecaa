// Package claimstore keeps the durable records behind claims: reservations,
// which say a value is taken until the read model shows it, and the stored
// outcomes of idempotent commands. The uniqueness package writes
// reservations (uniqueness.Reserve); the idempotency package writes
// outcomes. One store serves both.
//
// A Store is a backend: NewMemory here (one process), claimstore/postgres
// (every node sharing a database) and claimstore/sqlite (one host). Every
// backend passes the conformance suite in claimstore/claimstoretest.
//
// # Reservations
//
// A reservation is written by the holder of a value's claim, before its
// handler runs, as pending and owned by the command (Reserve); it is
// confirmed once the handler succeeded (Confirm) and cancelled when it
// failed (Cancel). While a reservation is held the value is taken, whatever
// the read model shows: this is what bridges the lag of a projection.
//
// A pending reservation found by another claimant is in doubt: its owner
// is gone (only the holder of the claim reserves, and the finder holds it
// now), and its write may or may not have committed. Reserve keeps it
// (the value taken) until it is older than the caller's maxLag, then hands
// it over. A confirmed reservation is never handed over: the value is taken
// until Drop deletes it, once the read model shows the value or the
// application frees it.
//
// Ages are measured by the store's clock (for PostgreSQL, the server's),
// never by the clocks of the nodes, so nodes whose clocks differ agree.
//
// # Outcomes
//
// An outcome is the answer of an idempotent command's first run, stored
// under its idempotency key for a retention period: the fingerprint of its
// payload, and its JSON result or its encoded rejection. An outcome whose
// retention has passed is not found, and PurgeOutcomes deletes it.
package claimstore
