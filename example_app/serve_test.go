package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
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

// Without -data the embedded node's file is in the user's cache
// directory, not in the working directory (a clone of the repository,
// often): the start-up line names it, and it is there after the node
// stopped, its directory created.
func TestServeDataDefault(t *testing.T) {
	cache, work := t.TempDir(), t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	t.Setenv("HOME", t.TempDir())
	t.Setenv("DATABASE_URL", "")
	t.Chdir(work)
	want := filepath.Join(cache, "claimbus", "example_app", "claimbus.db")

	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, run(context.Background(), []string{"serve", "-h"}, &stdout, &stderr))
	require.Contains(t, stderr.String(), `(default "`+want+`")`)

	ctx, cancel := context.WithCancel(context.Background())
	exited := make(chan int, 1)
	var out, errOut syncBuffer
	go func() { exited <- run(ctx, []string{"serve", "-addr", "127.0.0.1:0"}, &out, &errOut) }()
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "listening on") }, 10*time.Second, 10*time.Millisecond, "stderr: %s", errOut.String())
	require.Contains(t, out.String(), "(sqlite "+want+", transport inprocess)")
	cancel()
	require.Equal(t, 0, <-exited, "stderr: %s", errOut.String())

	require.FileExists(t, want)
	left, err := os.ReadDir(work)
	require.NoError(t, err)
	require.Empty(t, left, "nothing in the working directory")
}

// An -addr another process listens on fails the start before any file is
// created, with one line saying what to do.
func TestServeAddrInUse(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"serve", "-db", "", "-data", filepath.Join(dir, "claimbus.db"), "-addr", ln.Addr().String()}, &stdout, &stderr)
	require.Equal(t, 1, code)
	line, _, _ := strings.Cut(stderr.String(), "\n")
	require.Equal(t, "example_app serve: -addr "+ln.Addr().String()+": the address is in use: stop what listens there, or give another -addr (port 0 picks a free one)", line)
	left, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, left, "no file is left behind")
}

// A start cut short (Ctrl-C while the node starts) removes the SQLite
// file it created, and the files beside it.
func TestServeStartCancelledRemovesFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"serve", "-db", "", "-data", filepath.Join(dir, "claimbus.db"), "-addr", "127.0.0.1:0"}, &stdout, &stderr)
	require.Equal(t, 1, code, "stdout: %s", stdout.String())
	left, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, left, "no file is left behind: %s", stderr.String())
}

// A -data that cannot be the node's file is one line naming the path and
// why, not SQLite's "unable to open database file (14)"; no file is left
// behind, and a file that was there is untouched.
func TestServeBadData(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "notes.txt")
	require.NoError(t, os.WriteFile(file, []byte("not a database, and long enough for SQLite to read its header: 0123456789abcdefghijklmnopqrstuvwxyz\n"), 0o644))
	tests := []struct {
		name, data, line string
		asRoot           bool // whether the case holds for root, whom permissions do not stop
	}{
		{"no such directory", filepath.Join(dir, "nope", "claimbus.db"),
			"-data " + filepath.Join(dir, "nope", "claimbus.db") + ": the directory " + filepath.Join(dir, "nope") + " does not exist (create it, or give another -data)", true},
		{"a directory", dir, "-data " + dir + " is a directory: give a file, such as " + filepath.Join(dir, "claimbus.db"), true},
		{"under a file", filepath.Join(file, "claimbus.db"),
			"-data " + filepath.Join(file, "claimbus.db") + ": " + file + " is not a directory", true},
		{"not SQLite", file, "-data " + file + " is not an SQLite database: give another -data (serve never writes over a file that is not one)", true},
	}
	readOnly := filepath.Join(dir, "read-only")
	require.NoError(t, os.Mkdir(readOnly, 0o500))
	readOnlyFile := filepath.Join(dir, "read-only.db")
	require.NoError(t, os.WriteFile(readOnlyFile, nil, 0o400))
	tests = append(tests,
		struct {
			name, data, line string
			asRoot           bool
		}{"directory not writable", filepath.Join(readOnly, "claimbus.db"),
			"-data " + filepath.Join(readOnly, "claimbus.db") + ": cannot create the file: permission denied", false},
		struct {
			name, data, line string
			asRoot           bool
		}{"file not writable", readOnlyFile, "-data " + readOnlyFile + ": cannot open the file for writing: permission denied", false})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !tt.asRoot && os.Geteuid() == 0 {
				t.Skip("root writes where permissions say no")
			}
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), []string{"serve", "-db", "", "-data", tt.data, "-addr", "127.0.0.1:0"}, &stdout, &stderr)
			require.Equal(t, 1, code, "stdout: %s", stdout.String())
			line, _, _ := strings.Cut(stderr.String(), "\n")
			require.Equal(t, "example_app serve: "+tt.line, line)
		})
	}
	left, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range left {
		names = append(names, e.Name())
	}
	require.ElementsMatch(t, []string{"notes.txt", "read-only", "read-only.db"}, names, "no file is left behind")
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(b), "not a database"), "the file is untouched")
}
