// Package telemetry traces and measures claimbus commands on
// OpenTelemetry. It depends on the OpenTelemetry API only (otel, metric,
// trace); the application brings the SDK and exporters. The core packages
// do not import it: they report through the observe seam, the Stats of
// their stores (lockstore.StatsReporter, uniqueness.Middleware.Stats) and
// bus.Config.OnSend.
//
// # Turning it on
//
//	tel, err := telemetry.New(telemetry.Config{TracerProvider: tp, MeterProvider: mp})
//	...
//	b, err := bus.New(bus.Config{
//		Middleware: []middleware.Middleware{tel, unique, locks}, // tel first
//		OnSend:     tel.OnSend,
//	})
//	_ = tel.ObserveLocker("node-a", store) // a store that reports lockstore.Stats
//	_ = tel.ObserveClaims("node-a", unique)
//	defer tel.Close()
//
// Telemetry is a middleware.Middleware; put it first, so that its span
// covers the other middleware. On a Watermill router or cqrs processor
// (middleware.RouterMiddleware and friends) it works the same; call OnSend
// on the messages you publish to carry the trace.
//
// # Traces
//
// OnSend writes the trace context of the sender's ctx into the message's
// metadata with the configured propagator (default W3C Trace Context:
// metadata "traceparent" and "tracestate", as Watermill's OpenTelemetry
// integrations do). On the handling node, in process or over any
// transport, BeforeDispatch extracts it, so a Dispatch on node A and its
// handler on node B are one trace. Spans:
//
//   - "handle <command name>" (kind consumer), per command, from the first
//     hook to the last: attributes claimbus.command.name,
//     claimbus.command.id, claimbus.correlation_id, claimbus.causation_id
//     (when set), claimbus.outcome (ok, rejected, error) and, for a
//     rejection, claimbus.rejection.code and claimbus.rejection.field.
//     Status Error for the outcome error and for the rejections
//     unavailable and timeout (trouble, not the sender's mistake). The
//     attributes are set when the span ends, in one call (a sampler sees
//     the span's name and parent only). The
//     handler's context carries it: commands the handler dispatches are
//     its children.
//   - "claimbus.claim.wait" (claimbus.field): the wait for one claim of
//     the uniqueness middleware, with its children "claimbus.lock"
//     (claimbus.key.namespace), "claimbus.lookup" (claimbus.field) and,
//     for a rule that reserves, "claimbus.reservation.write"
//     (claimbus.field); the re-checks and cancellations at release are
//     children of the command's span. A reservation's confirmation lands
//     after the answer (see uniqueness.Reserve) and is no step of the
//     command.
//   - "claimbus.idempotency": the idempotency middleware's wait for a
//     key's lock and read of its stored outcome, for a command with a key;
//   - "claimbus.serialize" (claimbus.key.namespace): a Serialize call of
//     the PostgreSQL lock store made with a context that carries a tracer
//     (a handler's context does; elsewhere use StepTracer).
//
// A failed step has status Error and claimbus.step.failed=true. A step
// that ends in a business answer (a claim wait ending in already_taken) has
// not failed: it carries claimbus.rejection.code and no status.
//
// # Metrics
//
// Instrument names are OpenTelemetry's; the Prometheus exporter turns dots
// into underscores and adds _total to counters and _seconds to durations
// (claimbus_commands_total, claimbus_claim_wait_duration_seconds).
//
//   - claimbus.commands (counter, {command}): claimbus.command.name,
//     claimbus.outcome.
//   - claimbus.rejections (counter, {rejection}): claimbus.command.name,
//     claimbus.rejection.code, claimbus.rejection.field.
//   - claimbus.command.duration (histogram, s): claimbus.command.name,
//     claimbus.outcome.
//   - claimbus.claim.wait.duration (histogram, s): claimbus.field,
//     claimbus.step.failed (false for a wait ending in already_taken); one
//     value per claim wait.
//   - claimbus.claim.hold.duration (histogram, s): claimbus.command.name;
//     from the last claim granted to the release (measured, not a span:
//     the command's span covers it).
//   - Observable, per store registered with ObserveLocker (attribute
//     claimbus.store): claimbus.locks.held and claimbus.locks.waiting
//     (gauges), claimbus.lockconn.round_trips,
//     claimbus.lockconn.batched_requests (their ratio is the mean batch
//     size), claimbus.lockconn.reconnects, claimbus.locks.lost and
//     claimbus.locks.capacity_refusals (counters). A store reports what
//     it keeps (see lockstore.Stats); the others stay 0.
//   - Observable, per ObserveClaims: claimbus.claims.held,
//     claimbus.claims.waiting and claimbus.reservations.pending (gauges),
//     claimbus.reservations.confirmed and claimbus.reservations.cancelled
//     (counters).
//
// Durations use explicit buckets from 100µs to 30s.
//
// # Cost
//
// Unset, the seams cost a nil check (OnSend), one context lookup per
// claimed command in the uniqueness middleware and per Serialize call, and
// allocate nothing. On, a command pays for its SDK span and a few
// measurements (about 2.7µs and 10 allocations in BenchmarkHooks, against
// 1.5µs for a bare SDK span and two measurements), and each claim for
// three more spans; see bench_test.go.
package telemetry
