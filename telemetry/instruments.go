package telemetry

import (
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Attribute keys of claimbus's spans and metrics.
const (
	attrCommandName   = attribute.Key("claimbus.command.name")
	attrCommandID     = attribute.Key("claimbus.command.id")
	attrCorrelationID = attribute.Key("claimbus.correlation_id")
	attrCausationID   = attribute.Key("claimbus.causation_id")
	// attrOutcome is outcomeOK, outcomeRejected or outcomeError.
	attrOutcome        = attribute.Key("claimbus.outcome")
	attrRejectionCode  = attribute.Key("claimbus.rejection.code")
	attrRejectionField = attribute.Key("claimbus.rejection.field")
	attrField          = attribute.Key("claimbus.field")
	attrKeyNamespace   = attribute.Key("claimbus.key.namespace")
	attrStore          = attribute.Key("claimbus.store")
	attrStepFailed     = attribute.Key("claimbus.step.failed")
)

// Outcomes of a command (attrOutcome).
const (
	// outcomeOK: the handler succeeded, or a hook halted the command as
	// already done (a redelivery).
	outcomeOK = "ok"
	// outcomeRejected: the command was halted or failed with a
	// *middleware.Rejection (attrRejectionCode says which).
	outcomeRejected = "rejected"
	// outcomeError: any other failure (a handler error, a panic).
	outcomeError = "error"
)

// Names of the instruments.
const (
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
	metricClaimsWaiting    = "claimbus.claims.waiting"

	metricReservationsPending   = "claimbus.reservations.pending"
	metricReservationsConfirmed = "claimbus.reservations.confirmed"
	metricReservationsCancelled = "claimbus.reservations.cancelled"
)

// durationBuckets are the histogram bounds, in seconds: 100µs to 30s.
var durationBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// instruments are the instruments of one Telemetry.
type instruments struct {
	rejections      metric.Int64Counter
	commandDuration metric.Float64Histogram
	claimWait       metric.Float64Histogram
	claimHold       metric.Float64Histogram

	locksHeld, locksWaiting, lockConns metric.Int64ObservableGauge
	roundTrips, batched, reconnects    metric.Int64ObservableCounter
	locksLost, capacity                metric.Int64ObservableCounter
	claimsHeld, claimsWaiting          metric.Int64ObservableGauge
	resvPending                        metric.Int64ObservableGauge
	resvConfirmed, resvCancelled       metric.Int64ObservableCounter
}

func (in *instruments) init(m metric.Meter) error {
	var errs []error
	keep := func(err error) { errs = append(errs, err) }
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		keep(err)
		return c
	}
	histogram := func(name, desc string) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(durationBuckets...))
		keep(err)
		return h
	}
	gauge := func(name, unit, desc string) metric.Int64ObservableGauge {
		g, err := m.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		keep(err)
		return g
	}
	total := func(name, unit, desc string) metric.Int64ObservableCounter {
		c, err := m.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		keep(err)
		return c
	}
	in.rejections = counter(metricRejections, "{rejection}", "Commands rejected, by name, code and field.")
	in.commandDuration = histogram(metricCommandDuration, "Time from a command's first hook to its last, by name and outcome; its count is the commands handled.")
	in.claimWait = histogram(metricClaimWait, "Wait for one claim, its lock and lookups included, by field.")
	in.claimHold = histogram(metricClaimHold, "Time a command held its claims, by command name.")
	in.locksHeld = gauge(metricLocksHeld, "{lock}", "Locks a store holds now.")
	in.locksWaiting = gauge(metricLocksWaiting, "{waiter}", "Lock calls waiting for a key now.")
	in.roundTrips = total(metricRoundTrips, "{round_trip}", "Statements sent by the lock connections.")
	in.batched = total(metricBatchedRequests, "{request}", "Lock and unlock requests carried by the lock connections' round trips.")
	in.reconnects = total(metricReconnects, "{reconnect}", "Lock connections connected again after they broke.")
	in.lockConns = gauge(metricLockConns, "{connection}", "Lock connections a store has open now.")
	in.locksLost = total(metricLocksLost, "{lock}", "Locks that ended other than by their release.")
	in.capacity = total(metricCapacityRefusals, "{request}", "Lock requests refused for lack of capacity.")
	in.claimsHeld = gauge(metricClaimsHeld, "{claim}", "Claims of this process granted and not released.")
	in.claimsWaiting = gauge(metricClaimsWaiting, "{claim}", "Claimants of this process waiting for a key.")
	in.resvPending = gauge(metricReservationsPending, "{reservation}", "Reservations this process wrote and has not confirmed or cancelled yet.")
	in.resvConfirmed = total(metricReservationsConfirmed, "{reservation}", "Reservations this process confirmed (their commands succeeded).")
	in.resvCancelled = total(metricReservationsCancelled, "{reservation}", "Reservations this process cancelled (their commands failed).")
	return errors.Join(errs...)
}

func (in *instruments) observables() []metric.Observable {
	return []metric.Observable{in.locksHeld, in.locksWaiting, in.roundTrips, in.batched, in.reconnects, in.lockConns,
		in.locksLost, in.capacity, in.claimsHeld, in.claimsWaiting, in.resvPending, in.resvConfirmed, in.resvCancelled}
}
