package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

var pgReady = regexp.MustCompile(`PostgreSQL (postgres://\S+) in (\S+)`)

// example_app pg starts a server whose printed URL takes connections, and
// Ctrl-C (the context's end) stops it and removes its directory, exit 0.
func TestPG(t *testing.T) {
	if _, _, err := pgBinaries(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run1, interrupt := context.WithCancel(ctx)
	defer interrupt()
	var stdout, stderr syncBuffer
	code := make(chan int, 1)
	go func() { code <- run(run1, []string{"pg"}, &stdout, &stderr) }()

	var m []string
	require.Eventually(t, func() bool {
		m = pgReady.FindStringSubmatch(stdout.String())
		select {
		case c := <-code:
			t.Fatalf("example_app pg exited %d:\n%s%s", c, stdout.String(), stderr.String())
		default:
		}
		return m != nil
	}, time.Minute, 20*time.Millisecond, "example_app pg prints its URL")
	url, dir := m[1], m[2]
	require.DirExists(t, dir)

	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	var one int
	require.NoError(t, conn.QueryRow(ctx, "SELECT 1").Scan(&one))
	require.Equal(t, 1, one)
	require.NoError(t, conn.Close(ctx))

	interrupt()
	select {
	case c := <-code:
		require.Equal(t, 0, c, "%s%s", stdout.String(), stderr.String())
	case <-ctx.Done():
		t.Fatal("example_app pg did not stop")
	}
	require.NoDirExists(t, dir)
	require.Contains(t, stdout.String(), "stopped, "+dir+" removed")
	_, err = pgx.Connect(ctx, url)
	require.Error(t, err, "the server is gone")
}

// Bad flags are a usage error.
func TestPGBadFlags(t *testing.T) {
	var out bytes.Buffer
	require.Equal(t, 2, run(context.Background(), []string{"pg", "extra"}, &out, &out))
	require.Equal(t, 2, run(context.Background(), []string{"pg", "-port", "70000"}, &out, &out))
}
