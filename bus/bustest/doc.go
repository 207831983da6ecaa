// Package bustest tests buses: a conformance suite that every transport of
// package bus passes (Run), and a bus with memory stores for the
// integration tests of an application that uses claimbus (NewBus, Reset,
// RequireRejection), and the same for an application's own cqrs command
// processor answering requestreply senders (NewCQRS). Both log failures to
// the test's log and reset the application's state with their stores
// (OnReset).
//
// Run checks, against a Harness that makes the nodes of one backend, what a
// transport must keep for the bus on it; the checks of a capability the
// Harness does not declare (MultiNode, Durable, Redelivery, LossNotifier)
// are skipped.
//
// docs/bus.md#busbustest describes the suite and the integration-test bus.
package bustest
