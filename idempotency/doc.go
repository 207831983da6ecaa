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
// idempotency/README.md states the contract, the wiring and the cost.
package idempotency
