package main

import (
	"context"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
)

// scrape reads the metric families of GET url/metrics.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return families
}

// value sums the counter or gauge values, or histogram counts, of family
// name whose labels include want.
func value(t *testing.T, families map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	t.Helper()
	f, ok := families[name]
	require.True(t, ok, "no metric %s among %v", name, keys(families))
	var sum float64
	for _, m := range f.GetMetric() {
		labels := make(map[string]string)
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range want {
			match = match && labels[k] == v
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}

func keys(m map[string]*dto.MetricFamily) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// A node served with -trace stdout, after a storm: GET /metrics counts
// the storm's answers (commands ok = 201s, rejections already_taken =
// 409s), and the spans of the commands are printed once the node stops.
func TestServeMetricsAfterStorm(t *testing.T) {
	t.Parallel()
	data := filepath.Join(t.TempDir(), "claimbus.db")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	exited := make(chan int, 1)
	var out, errOut syncBuffer
	go func() {
		exited <- run(ctx, []string{"serve", "-db", "", "-data", data, "-addr", "127.0.0.1:0", "-trace", "stdout"}, &out, &errOut)
	}()
	listening := regexp.MustCompile(`listening on (http://\S+) `)
	require.Eventually(t, func() bool { return listening.MatchString(out.String()) }, 10*time.Second, 10*time.Millisecond, "stderr: %s", errOut.String())
	url := listening.FindStringSubmatch(out.String())[1]

	code, stdout, stderr := runStorm(t, "-target", url, "-requests", "300", "-emails", "30", "-concurrency", "8", "-progress", "off")
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	created := stormCount(t, stdout, `(?m)^  201 created +(\d+)$`)
	taken := stormCount(t, stdout, `(?m)^  409 conflict +\d+  already_taken email (\d+)$`)
	require.Equal(t, 30, created)
	require.Equal(t, 270, taken)

	m := scrape(t, url)
	name := map[string]string{"claimbus_command_name": "commands.CreateStaff"}
	with := func(k, v string) map[string]string {
		l := map[string]string{k: v}
		for k, v := range name {
			l[k] = v
		}
		return l
	}
	require.EqualValues(t, created, value(t, m, "claimbus_command_duration_seconds", with("claimbus_outcome", "ok")))
	require.EqualValues(t, taken, value(t, m, "claimbus_command_duration_seconds", with("claimbus_outcome", "rejected")))
	require.EqualValues(t, taken, value(t, m, "claimbus_rejections_total", with("claimbus_rejection_code", "already_taken")))
	require.EqualValues(t, created+taken, value(t, m, "claimbus_command_duration_seconds", name))
	require.EqualValues(t, created, value(t, m, "claimbus_claim_hold_duration_seconds", name))
	require.EqualValues(t, created+taken, value(t, m, "claimbus_claim_wait_duration_seconds", map[string]string{"claimbus_field": "email"}),
		"every sign-up waited for its claim once")
	require.Zero(t, value(t, m, "claimbus_claims_held", map[string]string{"claimbus_store": "local"}), "the storm is over")
	// The operator's metrics: HTTP answers by route and status, their
	// latency, the Go runtime, the process, and which service and node.
	require.EqualValues(t, created, value(t, m, "http_requests_total", map[string]string{"route": "POST /staff", "status": "201"}))
	require.EqualValues(t, taken, value(t, m, "http_requests_total", map[string]string{"route": "POST /staff", "status": "409"}))
	require.EqualValues(t, created+taken, value(t, m, "http_request_duration_seconds", map[string]string{"route": "POST /staff"}))
	require.Positive(t, value(t, m, "go_goroutines", nil))
	require.Positive(t, value(t, m, "process_cpu_seconds_total", nil))
	require.EqualValues(t, 1, value(t, m, "target_info", map[string]string{"service_name": "claimbus-example"}))

	cancel()
	require.Equal(t, 0, <-exited, "stderr: %s", errOut.String())
	spans := strings.Count(out.String(), `"Name":"handle commands.CreateStaff"`)
	require.Equal(t, created+taken, spans, "one span per sign-up printed at shutdown")
}

// stormCount reads the number pattern captures from the storm's report.
func stormCount(t *testing.T, report, pattern string) int {
	t.Helper()
	m := regexp.MustCompile(pattern).FindStringSubmatch(report)
	require.NotNil(t, m, "%s not in:\n%s", pattern, report)
	n, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	return n
}
