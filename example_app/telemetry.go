package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
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
	// requests and latency are the HTTP metrics (see handler).
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	// shutdown flushes and stops the providers.
	shutdown []func(context.Context) error
}

// newObservability sets up the providers of node; traces go to out when
// traceTo is traceStdout. Besides claimbus's metrics, GET /metrics has
// the Go runtime's and the process's, and the HTTP requests by route and
// status with their latency; every metric and span names the service
// (service.name) and the node (service.instance.id).
func newObservability(node, traceTo string, out io.Writer) (*observability, error) {
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", serviceName), attribute.String("service.instance.id", node))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter), sdkmetric.WithResource(res))
	o := &observability{
		metrics:  promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
		shutdown: []func(context.Context) error{mp.Shutdown},
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "http_requests_total", Help: "HTTP requests answered, by route and status.",
		}, []string{"route", "status"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "http_request_duration_seconds", Help: "Time to answer an HTTP request, by route.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16), // 0.5ms to 16s
		}, []string{"route"}),
	}
	if err := errors.Join(
		reg.Register(collectors.NewGoCollector()),
		reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})),
		reg.Register(o.requests),
		reg.Register(o.latency),
	); err != nil {
		return nil, errors.Join(fmt.Errorf("metrics: %w", err), o.close())
	}
	var tp trace.TracerProvider = noop.NewTracerProvider()
	if traceTo == traceStdout {
		spans, err := stdouttrace.New(stdouttrace.WithWriter(out))
		if err != nil {
			return nil, errors.Join(fmt.Errorf("traces: %w", err), o.close())
		}
		sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(spans), sdktrace.WithResource(res))
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
//
// Every request is counted by route (api's Route, "unmatched" for a path
// it has no route for) and status, and timed by route.
func (o *observability) handler(api http.Handler) http.Handler {
	router, _ := api.(interface{ Route(r *http.Request) string })
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.EscapedPath() == "/metrics" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
			o.metrics.ServeHTTP(w, r)
			return
		}
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		api.ServeHTTP(sw, r)
		route := "unmatched"
		if router != nil {
			route = cmp.Or(router.Route(r), route)
		}
		o.requests.WithLabelValues(route, strconv.Itoa(sw.status)).Inc()
		o.latency.WithLabelValues(route).Observe(time.Since(start).Seconds())
	})
}

// serviceName is the service.name of the example's metrics and spans.
const serviceName = "claimbus-example"

// statusWriter notes the status of the answer it writes.
type statusWriter struct {
	http.ResponseWriter
	status      int
	wroteHeader bool
}

func (w *statusWriter) WriteHeader(status int) {
	if !w.wroteHeader {
		w.status, w.wroteHeader = status, true
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wroteHeader = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

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
