// Package telemetrytest gives tests and benchmarks a telemetry.Telemetry
// on real OpenTelemetry SDK providers, shut down when the test ends.
package telemetrytest

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/claimbus/claimbus/telemetry"
)

// New returns Telemetry whose spans, sampled by sampler, end in a batch
// processor (as in production) with a no-op exporter, and whose metrics
// are aggregated for a manual reader nobody reads. A nil sampler makes no
// spans at all (the no-op tracer): metrics only.
func New(tb testing.TB, sampler sdktrace.Sampler) *telemetry.Telemetry {
	tb.Helper()
	var tp trace.TracerProvider = noop.NewTracerProvider()
	if sampler != nil {
		sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()), sdktrace.WithSampler(sampler))
		tb.Cleanup(func() { require.NoError(tb, sdk.Shutdown(context.Background())) })
		tp = sdk
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	tb.Cleanup(func() { require.NoError(tb, mp.Shutdown(context.Background())) })
	tel, err := telemetry.New(telemetry.Config{TracerProvider: tp, MeterProvider: mp})
	require.NoError(tb, err)
	tb.Cleanup(func() { require.NoError(tb, tel.Close()) })
	return tel
}
