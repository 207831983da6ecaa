package telemetry

import (
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Attribute keys of claimbus's spans and metrics.
const (
	AttrCommandName   = attribute.Key("claimbus.command.name")
	AttrCommandID     = attribute.Key("claimbus.command.id")
	AttrCorrelationID = attribute.Key("claimbus.correlation_id")
	AttrCausationID   = attribute.Key("claimbus.causation_id")
	// AttrOutcome is OutcomeOK, OutcomeRejected or OutcomeError.
	AttrOutcome        = attribute.Key("claimbus.outcome")
	AttrRejectionCode  = attribute.Key("claimbus.rejection.code")
	AttrRejectionField = attribute.Key("claimbus.rejection.field")
	AttrField          = attribute.Key("claimbus.field")
	AttrKeyNamespace   = attribute.Key("claimbus.key.namespace")
	AttrStore          = attribute.Key("claimbus.store")
	AttrStepFailed     = attribute.Key("claimbus.step.failed")
)

// Outcomes of a command (AttrOutcome).
const (
	// OutcomeOK: the handler succeeded, or a hook halted the command as
	// already done (a redelivery).
	OutcomeOK = "ok"
	// OutcomeRejected: the command was halted or failed with a
	// *middleware.Rejection (AttrRejectionCode says which).
	OutcomeRejected = "rejected"
	// OutcomeError: any other failure (a handler error, a panic).
	OutcomeError = "error"
)

// Names of the instruments.
const (
	MetricCommands         = "claimbus.commands"
	MetricRejections       = "claimbus.rejections"
	MetricCommandDuration  = "claimbus.command.duration"
	MetricClaimWait        = "claimbus.claim.wait.duration"
	MetricClaimHold        = "claimbus.claim.hold.duration"
	MetricLocksHeld        = "claimbus.locks.held"
	MetricLocksWaiting     = "claimbus.locks.waiting"
	MetricRoundTrips       = "claimbus.lockconn.round_trips"
	MetricBatchedRequests  = "claimbus.lockconn.batched_requests"
	MetricReconnects       = "claimbus.lockconn.reconnects"
	MetricLocksLost        = "claimbus.locks.lost"
	MetricCapacityRefusals = "claimbus.locks.capacity_refusals"
	MetricClaimsHeld       = "claimbus.claims.held"
	MetricClaimsWaiting    = "claimbus.claims.waiting"

	MetricReservationsPending   = "claimbus.reservations.pending"
	MetricReservationsConfirmed = "claimbus.reservations.confirmed"
	MetricReservationsCancelled = "claimbus.reservations.cancelled"
)

// durationBuckets are the histogram bounds, in seconds: 100µs to 30s.
var durationBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// instruments are the instruments of one Telemetry.
type instruments struct {
	commands        metric.Int64Counter
	rejections      metric.Int64Counter
	commandDuration metric.Float64Histogram
	claimWait       metric.Float64Histogram
	claimHold       metric.Float64Histogram

	locksHeld, locksWaiting         metric.Int64ObservableGauge
	roundTrips, batched, reconnects metric.Int64ObservableCounter
	locksLost, capacity             metric.Int64ObservableCounter
	claimsHeld, claimsWaiting       metric.Int64ObservableGauge
	resvPending                     metric.Int64ObservableGauge
	resvConfirmed, resvCancelled    metric.Int64ObservableCounter
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
	in.commands = counter(MetricCommands, "{command}", "Commands handled, by name and outcome.")
	in.rejections = counter(MetricRejections, "{rejection}", "Commands rejected, by name, code and field.")
	in.commandDuration = histogram(MetricCommandDuration, "Time from a command's first hook to its last, by name and outcome.")
	in.claimWait = histogram(MetricClaimWait, "Wait for one claim, its lock and lookups included, by field.")
	in.claimHold = histogram(MetricClaimHold, "Time a command held its claims, by command name.")
	in.locksHeld = gauge(MetricLocksHeld, "{lock}", "Locks a store holds now.")
	in.locksWaiting = gauge(MetricLocksWaiting, "{waiter}", "Lock calls waiting for a key now.")
	in.roundTrips = total(MetricRoundTrips, "{round_trip}", "Statements sent by the lock connections.")
	in.batched = total(MetricBatchedRequests, "{request}", "Lock and unlock requests carried by the lock connections' round trips.")
	in.reconnects = total(MetricReconnects, "{reconnect}", "Lock connections connected again after they broke.")
	in.locksLost = total(MetricLocksLost, "{lock}", "Locks that ended other than by their release.")
	in.capacity = total(MetricCapacityRefusals, "{request}", "Lock requests refused for lack of capacity.")
	in.claimsHeld = gauge(MetricClaimsHeld, "{claim}", "Claims of this process granted and not released.")
	in.claimsWaiting = gauge(MetricClaimsWaiting, "{claim}", "Claimants of this process waiting for a key.")
	in.resvPending = gauge(MetricReservationsPending, "{reservation}", "Reservations this process wrote and has not confirmed or cancelled yet.")
	in.resvConfirmed = total(MetricReservationsConfirmed, "{reservation}", "Reservations this process confirmed (their commands succeeded).")
	in.resvCancelled = total(MetricReservationsCancelled, "{reservation}", "Reservations this process cancelled (their commands failed).")
	return errors.Join(errs...)
}

func (in *instruments) observables() []metric.Observable {
	return []metric.Observable{in.locksHeld, in.locksWaiting, in.roundTrips, in.batched, in.reconnects,
		in.locksLost, in.capacity, in.claimsHeld, in.claimsWaiting, in.resvPending, in.resvConfirmed, in.resvCancelled}
}
