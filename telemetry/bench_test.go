package telemetry_test

import (
	"context"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/middleware"
	"github.com/claimbus/claimbus/telemetry"
	"github.com/claimbus/claimbus/telemetry/telemetrytest"
)

// Ping is the command of the benchmarks without claims.
type Ping struct{ N int }

// Modes of the benchmarks.
const (
	modeOff         = "off"         // no telemetry: the seams unset
	modeOn          = "on"          // every span sampled
	modeSampled     = "sampled-10%" // spans of one command in ten sampled
	modeMetricsOnly = "metrics"     // the no-op tracer, metrics only
)

// benchTelemetry returns Telemetry for mode on real SDK providers (see
// telemetrytest.New).
func benchTelemetry(b *testing.B, mode string) *telemetry.Telemetry {
	switch mode {
	case modeOn:
		return telemetrytest.New(b, sdktrace.AlwaysSample())
	case modeSampled:
		return telemetrytest.New(b, sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.1)))
	default:
		return telemetrytest.New(b, nil)
	}
}

// BenchmarkDispatch is a Dispatch over a GoChannel, handled by a no-op
// handler, with telemetry off (nothing set) and on (the middleware first,
// OnSend, real SDK providers; see the modes); with and without a
// uniqueness claim on a memory store.
func BenchmarkDispatch(b *testing.B) {
	for _, claims := range []bool{false, true} {
		for _, mode := range []string{modeOff, modeOn, modeSampled, modeMetricsOnly} {
			b.Run("claims="+strconv.FormatBool(claims)+"/telemetry="+mode, func(b *testing.B) {
				ps := newGoChannel(b)
				cfg := bus.Config{Publisher: ps, Subscriber: ps}
				var mws []middleware.Middleware
				if mode != modeOff {
					tel := benchTelemetry(b, mode)
					cfg.OnSend = tel.OnSend
					mws = append(mws, tel)
				}
				db := &users{emails: map[string]bool{}}
				if claims {
					unique, _ := newUnique(b, db)
					mws = append(mws, unique)
				}
				cfg.Middleware = mws
				bb, err := bus.New(cfg)
				require.NoError(b, err)
				require.NoError(b, bus.Handle(bb, db.create))
				require.NoError(b, bus.Handle(bb, func(context.Context, *Ping) (int, error) { return 1, nil }))
				require.NoError(b, bb.Start(context.Background()))
				b.Cleanup(func() { require.NoError(b, bb.Close()) })
				ctx := context.Background()
				b.ReportAllocs()
				cpu := startCPU()
				i := 0
				for b.Loop() {
					var err error
					if claims {
						i++
						_, err = bus.Dispatch[string](ctx, bb, &CreateUser{ID: "u", Email: "u" + strconv.Itoa(i) + "@example.com"})
					} else {
						_, err = bus.Dispatch[int](ctx, bb, &Ping{N: 1})
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				cpu.report(b)
			})
		}
	}
}

// cpuClock measures the CPU time of the process (every thread: the bus's
// goroutines, the span processor's, the GC) over a benchmark loop, which
// the wall clock of a loaded machine hides.
type cpuClock struct{ start time.Duration }

func startCPU() cpuClock { return cpuClock{start: processCPU()} }

// report reports the CPU time per operation as cpu-ns/op.
func (c cpuClock) report(b *testing.B) {
	b.ReportMetric(float64(processCPU()-c.start)/float64(b.N), "cpu-ns/op")
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkHooks puts the cost of the middleware's hooks for one command
// beside its floor, one SDK span started and ended and one measurement on
// the same providers.
func BenchmarkHooks(b *testing.B) {
	ctx := context.Background()
	b.Run("hooks", func(b *testing.B) {
		tel := benchTelemetry(b, modeOn)
		b.ReportAllocs()
		for b.Loop() {
			p := middleware.NewPipeline(ctx, &Ping{})
			p.CommandName, p.CommandUUID, p.CorrelationID = "telemetry_test.Ping", "id", "id"
			tel.BeforeDispatch(ctx, p)
			tel.AfterDispatch(ctx, p)
		}
	})
	b.Run("floor=sdk-span-and-a-measurement", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		b.Cleanup(func() {
			require.NoError(b, tp.Shutdown(ctx))
			require.NoError(b, mp.Shutdown(ctx))
		})
		tracer := tp.Tracer("floor")
		hist, err := mp.Meter("floor").Float64Histogram("h")
		require.NoError(b, err)
		b.ReportAllocs()
		for b.Loop() {
			sctx, span := tracer.Start(ctx, "handle telemetry_test.Ping")
			hist.Record(sctx, 0.001)
			span.End()
		}
	})
}
