package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// long says that the long form of the three-node suite runs
// (CLAIMBUS_LONG=1, make test/long): the full numbers of the storm and the
// pairs instead of the small default of go test ./...
var long = os.Getenv("CLAIMBUS_LONG") == "1"

// sizes picks the default or, with CLAIMBUS_LONG=1, the long number.
func sizes(short, full int) int {
	if long {
		return full
	}
	return short
}

// startNodes starts serve processes with the names on dsn, all at once,
// each with the flags, and waits until they serve.
func startNodes(t *testing.T, bin, dsn string, names []string, flags ...string) []*process {
	t.Helper()
	nodes := make([]*process, len(names))
	for i, name := range names {
		nodes[i] = startProcess(t, bin, dsn, name, flags...)
	}
	for _, p := range nodes {
		p.ready(t)
	}
	return nodes
}

// urls returns the base URLs of the nodes.
func urls(nodes ...*process) []string {
	out := make([]string, len(nodes))
	for i, p := range nodes {
		out[i] = p.url
	}
	return out
}

// stormSummary is what the storm tool's summary says.
type stormSummary struct {
	out                string  // the whole summary
	created, conflicts int     // 201 and 409 answers
	rate               float64 // req/s
}

var (
	createdLine  = regexp.MustCompile(`(?m)^\s+201 created\s+(\d+)`)
	conflictLine = regexp.MustCompile(`(?m)^\s+409 conflict\s+(\d+)`)
	rateLine     = regexp.MustCompile(`took \S+, (\d+) req/s`)
)

// runStorm runs `example_app storm` as a process against the targets and
// requires that it exits 0: no email created twice, no 5xx, no transport
// error, backstop_violations 0 on every node.
func runStorm(ctx context.Context, t *testing.T, bin string, targets []string, requests, emails int) stormSummary {
	t.Helper()
	out, err := stormProcess(ctx, bin, targets, requests, emails)
	return parseStorm(t, out, err)
}

// stormProcess runs the storm tool and returns its output: it touches no
// testing.T, so that it may run on a goroutine of its own (parseStorm then
// checks its result on the test's).
func stormProcess(ctx context.Context, bin string, targets []string, requests, emails int) (string, error) {
	cmd := exec.CommandContext(ctx, bin, "storm", "-target", strings.Join(targets, ","),
		"-requests", strconv.Itoa(requests), "-emails", strconv.Itoa(emails), "-progress", "off")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	dieWithTest(cmd)
	err := cmd.Run()
	return out.String(), err
}

// parseStorm checks a storm's exit and reads its summary.
func parseStorm(t *testing.T, out string, err error) stormSummary {
	t.Helper()
	require.NoError(t, err, "storm:\n%s", out)
	s := stormSummary{out: out}
	atoi := func(re *regexp.Regexp) int {
		m := re.FindStringSubmatch(s.out)
		require.NotNil(t, m, "%s in the summary:\n%s", re, s.out)
		n, err := strconv.Atoi(m[1])
		require.NoError(t, err)
		return n
	}
	s.created, s.conflicts = atoi(createdLine), atoi(conflictLine)
	s.rate = float64(atoi(rateLine))
	require.Contains(t, s.out, "check: OK:")
	t.Logf("%s", s.out)
	return s
}
