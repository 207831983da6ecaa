package telemetry_test

import "go.opentelemetry.io/otel/attribute"

// The attribute keys and instrument names the package documents (doc.go),
// spelled out here so that the tests check the documented names.
const (
	attrCommandName    = attribute.Key("claimbus.command.name")
	attrCommandID      = attribute.Key("claimbus.command.id")
	attrCorrelationID  = attribute.Key("claimbus.correlation_id")
	attrOutcome        = attribute.Key("claimbus.outcome")
	attrRejectionCode  = attribute.Key("claimbus.rejection.code")
	attrRejectionField = attribute.Key("claimbus.rejection.field")
	attrField          = attribute.Key("claimbus.field")
	attrKeyNamespace   = attribute.Key("claimbus.key.namespace")
	attrStore          = attribute.Key("claimbus.store")
	attrStepFailed     = attribute.Key("claimbus.step.failed")

	metricRejections       = "claimbus.rejections"
	metricCommandDuration  = "claimbus.command.duration"
	metricClaimWait        = "claimbus.claim.wait.duration"
	metricClaimHold        = "claimbus.claim.hold.duration"
	metricLocksHeld        = "claimbus.locks.held"
	metricLocksWaiting     = "claimbus.locks.waiting"
	metricRoundTrips       = "claimbus.lockconn.round_trips"
	metricBatchedRequests  = "claimbus.lockconn.batched_requests"
	metricReconnects       = "claimbus.lockconn.reconnects"
	metricLockConns        = "claimbus.lockconn.open"
	metricLocksLost        = "claimbus.locks.lost"
	metricCapacityRefusals = "claimbus.locks.capacity_refusals"
	metricClaimsHeld       = "claimbus.claims.held"
)
