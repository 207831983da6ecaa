package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/claimbus/claimbus/telemetry"
)

// Values of -trace.
const (
	traceOff    = "off"
	traceStdout = "stdout"
)

// observability is the telemetry of a serving node: its metrics, served
// on GET /metrics in the Prometheus text format, and its traces, printed
// to stdout with -trace stdout.
type observability struct {
	tel     *telemetry.Telemetry
	metrics http.Handler
	// shutdown flushes and stops the providers.
	shutdown []func(context.Context) error
}

// newObservability sets up the providers of a node; traces go to out when
// traceTo is traceStdout.
func newObservability(traceTo string, out io.Writer) (*observability, error) {
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	o := &observability{
		metrics:  promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
		shutdown: []func(context.Context) error{mp.Shutdown},
	}
	var tp trace.TracerProvider = noop.NewTracerProvider()
	if traceTo == traceStdout {
		spans, err := stdouttrace.New(stdouttrace.WithWriter(out))
		if err != nil {
			return nil, errors.Join(fmt.Errorf("traces: %w", err), o.close())
		}
		sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(spans))
		o.shutdown = append(o.shutdown, sdk.Shutdown)
		tp = sdk
	}
	o.tel, err = telemetry.New(telemetry.Config{TracerProvider: tp, MeterProvider: mp})
	if err != nil {
		return nil, errors.Join(err, o.close())
	}
	return o, nil
}

// handler serves GET (and HEAD) /metrics, and the rest with api. It is no
// ServeMux: one would answer a path that is not in canonical form (such as
// //wallets/a) with a redirect and an HTML body before api could answer it
// with its JSON 404.
func (o *observability) handler(api http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.EscapedPath() == "/metrics" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
			o.metrics.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
}

// close flushes the spans not printed yet and stops the providers.
func (o *observability) close() error {
	var errs []error
	if o.tel != nil {
		errs = append(errs, o.tel.Close())
	}
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	for _, f := range o.shutdown {
		errs = append(errs, f(ctx))
	}
	return errors.Join(errs...)
}
