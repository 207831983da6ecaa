package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/claimbus/claimbus/internal/testlog"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The demo's counts are its guarantees: one member per address, one winner
// per race and per word, no overdraft, and the backstops never fire.
func TestDemo(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var out bytes.Buffer
	r, err := runDemo(ctx, &out)
	require.NoError(t, err, out.String())

	require.Equal(t, 64, r.Staff.Sent)
	require.Equal(t, 12, r.Staff.Created)
	require.Equal(t, 48, r.Staff.Taken)
	require.Equal(t, map[string]int{"email": 48}, r.Staff.TakenFields)
	require.Equal(t, 4, r.Staff.Invalid)
	require.Equal(t, map[string]int{"email": 4}, r.Staff.InvalidFields)
	require.Equal(t, 12, r.Staff.Rows)

	require.Equal(t, [2]string{"approved", "locked"}, r.Transfers.Race1)
	require.Equal(t, [2]string{"cancelled", "locked"}, r.Transfers.Race2)
	require.Equal(t, 3, r.Transfers.Approved)
	require.Equal(t, 7, r.Transfers.InsufficientFunds)
	require.Equal(t, int64(115_00), r.Transfers.AliceBalance)
	require.Equal(t, int64(5_00), r.Transfers.BobBalance)
	require.Equal(t, int64(120_00), r.Transfers.Total)

	require.Equal(t, map[string]int{"apple": 1, "river": 1, "stone": 1}, r.Lobby.Winners)
	require.Equal(t, 27, r.Lobby.Late)
	require.Equal(t, 10, r.Lobby.Wrong)
	require.Equal(t, 0, r.Lobby.WordsLeft)
	require.Zero(t, r.Backstops)

	require.Equal(t, eventsRun{Created: 12, Registered: 12, Members: 12}, r.Events.With, "with reservations, one StaffRegistered per address")
	without := r.Events.Without
	require.Greater(t, without.Registered, 12, "without reservations the lagging read model lets duplicates through")
	require.Equal(t, without.Created, without.Registered)
	require.Equal(t, 12, without.Members)
	require.EqualValues(t, without.Registered-12, without.Backstops, "the backstop catches each duplicate")

	require.Contains(t, out.String(), "already_taken:   48  by field: email 48")
	require.Contains(t, out.String(), "cancel arrives while approve holds the lock -> approve: approved, cancel: locked")
	require.Contains(t, out.String(), "winners: apple 1, river 1, stone 1")

	// The temporary directory, database and lock file included, is gone.
	left, err := os.ReadDir(tmp)
	require.NoError(t, err)
	require.Empty(t, left)

	// The story is the same every time, but for how many duplicates get
	// through without reservations, which depends on the timing.
	var again bytes.Buffer
	_, err = runDemo(ctx, &again)
	require.NoError(t, err)
	timed := regexp.MustCompile(`(?m)^   without reservations: .*$`)
	require.Equal(t, timed.ReplaceAllString(out.String(), ""), timed.ReplaceAllString(again.String(), ""))
}

func TestRunUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args   []string
		code   int
		stderr string
		stdout string
	}{
		{args: []string{"bogus"}, code: 2, stderr: `unknown command "bogus"`},
		{args: []string{"demo", "extra"}, code: 2, stderr: "the demo takes no arguments"},
		{args: []string{"help"}, code: 0, stdout: "example_app serve [flags]    run the HTTP API on an embedded SQLite file, or on PostgreSQL with -db URL"},
		{args: []string{"serve", "-h"}, code: 0, stderr: "-transport"},
		{args: []string{"serve", "-h"}, code: 0, stderr: "by default one node on the embedded SQLite file -data"},
		{args: []string{"serve", "-bogus"}, code: 2, stderr: "flag provided but not defined: -bogus"},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		require.Equal(t, tt.code, run(context.Background(), tt.args, &stdout, &stderr), "%v: %s", tt.args, stderr.String())
		require.Contains(t, stderr.String(), tt.stderr, tt.args)
		require.Contains(t, stdout.String(), tt.stdout, tt.args)
	}
}

// A flag a command does not have, or a flag's bad value, is one line
// naming it and -h, exit 2; -h still prints every flag.
func TestRunBadFlag(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		line string
	}{
		{[]string{"serve", "-bogus"}, "example_app serve: flag provided but not defined: -bogus (example_app serve -h lists the flags)"},
		{[]string{"serve", "-addr"}, "example_app serve: flag needs an argument: -addr (example_app serve -h lists the flags)"},
		{[]string{"serve", "-projection-lag", "soon"}, `example_app serve: invalid value "soon" for flag -projection-lag: parse error (example_app serve -h lists the flags)`},
		{[]string{"storm", "--bogus"}, "example_app storm: flag provided but not defined: -bogus (example_app storm -h lists the flags)"},
		{[]string{"storm", "-requests", "many"}, `example_app storm: invalid value "many" for flag -requests: parse error (example_app storm -h lists the flags)`},
		{[]string{"pg", "-bogus"}, "example_app pg: flag provided but not defined: -bogus (example_app pg -h lists the flags)"},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		require.Equal(t, 2, run(context.Background(), tt.args, &stdout, &stderr), "%v: %s", tt.args, stderr.String())
		require.Equal(t, tt.line+"\n", stderr.String(), tt.args)
		require.Empty(t, stdout.String(), tt.args)
	}
	for _, cmd := range []string{"serve", "storm", "pg"} {
		for _, h := range []string{"-h", "-help", "--help"} {
			var stdout, stderr bytes.Buffer
			require.Equal(t, 0, run(context.Background(), []string{cmd, h}, &stdout, &stderr), "%s %s: %s", cmd, h, stderr.String())
			require.Greater(t, strings.Count(stderr.String(), "\n"), 5, "%s %s prints every flag: %s", cmd, h, stderr.String())
			require.NotContains(t, stderr.String(), "flag provided", cmd)
		}
	}
}

// The fault tests' flag works under its name, and serve -h does not show
// it.
func TestServeHelpHidesTheTestFlag(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, run(context.Background(), []string{"serve", "-h"}, &stdout, &stderr))
	require.Contains(t, stderr.String(), "-node")
	require.NotContains(t, stderr.String(), "test-hold-email")
	require.NotContains(t, stderr.String(), "fault tests")

	stdout.Reset()
	stderr.Reset()
	code := run(context.Background(), []string{"serve", "-node", "a", "-db", "", "-test-hold-email", "nope"}, &stdout, &stderr)
	require.Equal(t, 2, code)
	require.Contains(t, stderr.String(), "-test-hold-email: ", "the flag is parsed and checked")
	require.NotContains(t, stderr.String(), "flag provided but not defined")
}

// Bad flags are all reported at once, each with what to do, before
// anything connects.
func TestServeFlags(t *testing.T) {
	t.Parallel()
	valid := serveFlags{addr: "127.0.0.1:0", node: "a", db: "postgres://u@127.0.0.1:5432/db", transport: "inprocess", logLevel: "info"}
	require.NoError(t, valid.validate())
	withNATS := valid
	withNATS.transport, withNATS.natsURL = "nats", "nats://127.0.0.1:4222, tls://user:pw@nats-2:4222"
	require.NoError(t, withNATS.validate())
	events := valid
	events.staffModel, events.projectionLag, events.reservations = "events", time.Second, true
	require.NoError(t, events.validate())

	tests := []struct {
		name string
		mod  func(*serveFlags)
		want []string
	}{
		{"no port", func(f *serveFlags) { f.addr = "127.0.0.1" }, []string{`-addr "127.0.0.1" is not host:port`}},
		{"bad port", func(f *serveFlags) { f.addr = "127.0.0.1:http" }, []string{"the port is not a number"}},
		{"port out of range", func(f *serveFlags) { f.addr = "127.0.0.1:70000" }, []string{"the port is not a number from 0 to 65535"}},
		{"no host", func(f *serveFlags) { f.addr = ":8080" }, []string{"give the host to listen on"}},
		{"no node", func(f *serveFlags) { f.node = "" }, []string{"-node \"\""}},
		{"node with space", func(f *serveFlags) { f.node = "node a" }, []string{`-node "node a"`}},
		{"embedded without data", func(f *serveFlags) { f.db = "" }, []string{"-data is empty"}},
		{"embedded with transport postgres", func(f *serveFlags) { f.db, f.data, f.transport = "", "x.db", "postgres" }, []string{"-transport postgres needs -db"}},
		{"embedded with transport nats", func(f *serveFlags) { f.db, f.data, f.transport, f.natsURL = "", "x.db", "nats", "nats://h:4222" },
			[]string{"-transport nats needs -db"}},
		{"data with db", func(f *serveFlags) { f.data, f.dataSet = "x.db", true }, []string{"-data is for the embedded node"}},
		{"db not a URL", func(f *serveFlags) { f.db = "host=x" }, []string{"postgres:// or postgresql:// URL"}},
		{"db bad port", func(f *serveFlags) { f.db = "postgres://u@h:notaport/db" }, []string{"-db:"}},
		{"transport", func(f *serveFlags) { f.transport = "kafka" }, []string{`-transport "kafka": want inprocess, postgres or nats`}},
		{"nats without url", func(f *serveFlags) { f.transport = "nats" }, []string{"-transport nats needs -nats-url"}},
		{"nats url without nats", func(f *serveFlags) { f.natsURL = "nats://127.0.0.1:4222" }, []string{"-nats-url is set but -transport is \"inprocess\""}},
		{"nats url not nats", func(f *serveFlags) { f.transport, f.natsURL = "nats", "http://127.0.0.1:4222" }, []string{"want a nats://"}},
		{"nats url no host", func(f *serveFlags) { f.transport, f.natsURL = "nats", "nats://127.0.0.1:4222,nats://" }, []string{"no host"}},
		{"log level", func(f *serveFlags) { f.logLevel = "loud" }, []string{`-log-level "loud"`}},
		{"trace", func(f *serveFlags) { f.trace = "jaeger" }, []string{`-trace "jaeger": want off or stdout`}},
		{"hold email", func(f *serveFlags) { f.holdEmail = "nope" }, []string{"-test-hold-email"}},
		{"staff model", func(f *serveFlags) { f.staffModel = "ledger" }, []string{`-staff-model "ledger": want table or events`}},
		{"events flags without the events model", func(f *serveFlags) { f.eventsOnly = []string{"projection-lag", "reservations"} },
			[]string{"-projection-lag, -reservations is for -staff-model events"}},
		{"negative projection lag", func(f *serveFlags) { f.staffModel, f.projectionLag = "events", -1 },
			[]string{"-projection-lag -1ns is negative"}},
		{"everything at once", func(f *serveFlags) {
			*f = serveFlags{addr: "x", transport: "kafka", logLevel: "loud"}
		}, []string{"-addr", "-node", "-data is empty", "-transport", "-log-level"}},
	}
	for _, tt := range tests {
		f := valid
		tt.mod(&f)
		err := f.validate()
		require.Error(t, err, tt.name)
		for _, w := range tt.want {
			require.Contains(t, err.Error(), w, tt.name)
		}
	}

	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"serve", "-node", "a b", "-db", "", "extra"}, &stdout, &stderr)
	require.Equal(t, 2, code)
	require.Contains(t, stderr.String(), "bad flags")
	require.Contains(t, stderr.String(), `-node "a b"`)
	require.Contains(t, stderr.String(), `unexpected arguments ["extra"]`)
}

// Without -db the node is embedded: -node defaults to "local" (and -data
// to a file in the user's cache directory, TestServeDataDefault), and a
// transport other than inprocess is refused.
func TestServeEmbeddedFlags(t *testing.T) {
	t.Parallel()
	embedded := serveFlags{addr: "127.0.0.1:0", node: "local", data: "claimbus.db", transport: "inprocess", logLevel: "info"}
	require.NoError(t, embedded.validate())

	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"serve", "-db", "", "-transport", "postgres", "-addr", "x"}, &stdout, &stderr)
	require.Equal(t, 2, code)
	require.Contains(t, stderr.String(), "-transport postgres needs -db")
	require.NotContains(t, stderr.String(), "-node", "the node name has a default on SQLite")

	stderr.Reset()
	code = run(context.Background(), []string{"serve", "-db", "postgres://u@127.0.0.1:5432/db", "-node", "a", "-data", "x.db", "-addr", "x"}, &stdout, &stderr)
	require.Equal(t, 2, code)
	require.Contains(t, stderr.String(), "-data is for the embedded node")
}

// A second embedded serve on the same -data file refuses to start, with
// one line naming the file.
func TestServeEmbeddedFileInUse(t *testing.T) {
	t.Parallel()
	data := filepath.Join(t.TempDir(), "claimbus.db")
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan int, 1)
	var out1, err1 syncBuffer
	go func() {
		first <- run(ctx, []string{"serve", "-db", "", "-data", data, "-addr", "127.0.0.1:0"}, &out1, &err1)
	}()
	require.Eventually(t, func() bool { return strings.Contains(out1.String(), "listening on") }, 10*time.Second, 10*time.Millisecond, "stderr: %s", err1.String())
	require.Contains(t, out1.String(), "node local listening on")

	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"serve", "-db", "", "-data", data, "-addr", "127.0.0.1:0"}, &stdout, &stderr)
	require.Equal(t, 1, code)
	line, _, _ := strings.Cut(stderr.String(), "\n")
	require.Equal(t, "example_app serve: another example_app is serving "+data+": one process per -data file (stop it, or give another -data)", line)

	cancel()
	require.Equal(t, 0, <-first)
}

// syncBuffer is a bytes.Buffer safe for one writer and other readers.
type syncBuffer = testlog.Buffer

// A database that cannot be reached is one line naming its address, the
// driver's multi-line error joined onto it.
func TestServeUnreachableDatabase(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"serve", "-node", "a", "-db", "postgres://u@127.0.0.1:1/x", "-addr", "127.0.0.1:0"}, &stdout, &stderr)
	require.Equal(t, 1, code)
	line, _, _ := strings.Cut(stderr.String(), "\n")
	require.True(t, strings.HasPrefix(line, "example_app serve: cannot reach the database at 127.0.0.1:1: "), "%s", stderr.String())
	require.Contains(t, line, "connection refused", "the cause is on the first line")
}
