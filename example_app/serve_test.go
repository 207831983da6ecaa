package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// startServe runs serve with args (and -addr 127.0.0.1:0) until the test
// ends, and returns the base URL it prints once it listens.
func startServe(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	exited := make(chan int, 1)
	var out, errOut syncBuffer
	go func() {
		exited <- run(ctx, append([]string{"serve", "-addr", "127.0.0.1:0"}, args...), &out, &errOut)
	}()
	t.Cleanup(func() {
		cancel()
		require.Equal(t, 0, <-exited, "stderr: %s", errOut.String())
	})
	listening := regexp.MustCompile(`listening on (http://\S+) `)
	require.Eventually(t, func() bool { return listening.MatchString(out.String()) }, 10*time.Second, 10*time.Millisecond, "stderr: %s", errOut.String())
	return listening.FindStringSubmatch(out.String())[1]
}

// A served node answers a path that is not in canonical form (an empty,
// . or .. segment) with the API's 404 JSON error, not with the redirect
// and HTML body of the ServeMux in front of GET /metrics; GET /metrics
// still answers.
func TestServeNoRedirects(t *testing.T) {
	t.Parallel()
	url := startServe(t, "-db", "", "-data", filepath.Join(t.TempDir(), "claimbus.db"))
	client := &http.Client{
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       time.Minute,
	}
	for _, p := range []string{"//wallets/wa", "/staff//x", "/wallets/./x", "/wallets/../healthz", "//metrics"} {
		resp, err := client.Get(url + p)
		require.NoError(t, err, p)
		raw, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, http.StatusNotFound, resp.StatusCode, "%s: %s", p, raw)
		require.Equal(t, "application/json", resp.Header.Get("Content-Type"), p)
		var body map[string]any
		require.NoError(t, json.Unmarshal(raw, &body), "%s: %s", p, raw)
		require.Equal(t, "not_found", body["code"], p)
		require.Equal(t, "no such route: the path is not in canonical form", body["message"], p)
	}

	resp, err := client.Get(url + "/metrics")
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, err = client.Post(url+"/metrics", "text/plain", nil)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "only GET and HEAD /metrics are routes")
}
