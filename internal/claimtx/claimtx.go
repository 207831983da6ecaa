// Package claimtx hands txcommand the statements of the claim stores that
// run in the caller's transaction, so that reservations and outcomes
// commit with the caller's writes, without making them part of the
// stores' API. Each store package sets its function in an init; txcommand
// asserts the value to the interface it declares (the store's methods are
// listed there), so that this package imports nothing of the module.
package claimtx

// PostgresOf returns the statements of a *claimstore/postgres.Store, and
// SQLiteOf those of a *claimstore/sqlite.Store; each is set by its store's
// package, which every caller imports to have a store.
var (
	PostgresOf func(store any) any
	SQLiteOf   func(store any) any
)
