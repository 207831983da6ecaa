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
}

func (in *instruments) init(m metric.Meter) error {
	var errs [14]error
	in.commands, errs[0] = m.Int64Counter(MetricCommands, metric.WithUnit("{command}"),
		metric.WithDescription("Commands handled, by name and outcome."))
	in.rejections, errs[1] = m.Int64Counter(MetricRejections, metric.WithUnit("{rejection}"),
		metric.WithDescription("Commands rejected, by name, code and field."))
	hist := metric.WithExplicitBucketBoundaries(durationBuckets...)
	in.commandDuration, errs[2] = m.Float64Histogram(MetricCommandDuration, metric.WithUnit("s"), hist,
		metric.WithDescription("Time from a command's first hook to its last, by name and outcome."))
	in.claimWait, errs[3] = m.Float64Histogram(MetricClaimWait, metric.WithUnit("s"), hist,
		metric.WithDescription("Wait for one claim, its lock and lookups included, by field."))
	in.claimHold, errs[4] = m.Float64Histogram(MetricClaimHold, metric.WithUnit("s"), hist,
		metric.WithDescription("Time a command held its claims, by command name."))
	in.locksHeld, errs[5] = m.Int64ObservableGauge(MetricLocksHeld, metric.WithUnit("{lock}"),
		metric.WithDescription("Locks a store holds now."))
	in.locksWaiting, errs[6] = m.Int64ObservableGauge(MetricLocksWaiting, metric.WithUnit("{waiter}"),
		metric.WithDescription("Lock calls waiting for a key now."))
	in.roundTrips, errs[7] = m.Int64ObservableCounter(MetricRoundTrips, metric.WithUnit("{round_trip}"),
		metric.WithDescription("Statements sent by the lock connections."))
	in.batched, errs[8] = m.Int64ObservableCounter(MetricBatchedRequests, metric.WithUnit("{request}"),
		metric.WithDescription("Lock and unlock requests carried by the lock connections' round trips."))
	in.reconnects, errs[9] = m.Int64ObservableCounter(MetricReconnects, metric.WithUnit("{reconnect}"),
		metric.WithDescription("Lock connections connected again after they broke."))
	in.locksLost, errs[10] = m.Int64ObservableCounter(MetricLocksLost, metric.WithUnit("{lock}"),
		metric.WithDescription("Locks that ended other than by their release."))
	in.capacity, errs[11] = m.Int64ObservableCounter(MetricCapacityRefusals, metric.WithUnit("{request}"),
		metric.WithDescription("Lock requests refused for lack of capacity."))
	in.claimsHeld, errs[12] = m.Int64ObservableGauge(MetricClaimsHeld, metric.WithUnit("{claim}"),
		metric.WithDescription("Claims of this process granted and not released."))
	in.claimsWaiting, errs[13] = m.Int64ObservableGauge(MetricClaimsWaiting, metric.WithUnit("{claim}"),
		metric.WithDescription("Claimants of this process waiting for a key."))
	return errors.Join(errs[:]...)
}

func (in *instruments) observables() []metric.Observable {
	return []metric.Observable{in.locksHeld, in.locksWaiting, in.roundTrips, in.batched, in.reconnects,
		in.locksLost, in.capacity, in.claimsHeld, in.claimsWaiting}
}
