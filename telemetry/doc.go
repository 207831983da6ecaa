// Package telemetry traces and measures claimbus commands on
// OpenTelemetry. It depends on the OpenTelemetry API only (otel, metric,
// trace); the application brings the SDK and exporters. The core packages
// do not import it: they report through the observe seam, the Stats of
// their stores (lockstore.StatsReporter, uniqueness.Middleware.Stats) and
// bus.Config.OnSend.
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
// on the messages you publish to carry the trace: OnSend writes the trace
// context into the message's metadata (default W3C Trace Context) and
// BeforeDispatch extracts it on the handling node, so a Dispatch and its
// handler on another node are one trace.
//
// Each command gets a span "handle <command name>" whose context the
// handler receives; claim waits, idempotency lookups and Serialize calls
// are child spans. The instruments count commands and rejections, time
// commands and claim waits and holds, and observe the stores registered
// with ObserveLocker and ObserveClaims. Unset, the seams allocate nothing.
//
// docs/telemetry.md lists the spans and their attributes, the instruments
// and their Prometheus names, and the cost.
package telemetry
