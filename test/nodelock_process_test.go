package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/natstest"
	"github.com/claimbus/claimbus/internal/pgtest"
)

// Two node processes on one private PostgreSQL cluster, crashed and
// restarted (pg_ctl restart -m immediate) in the middle of a storm of
// sign-ups, in every transport (nats: a NATS server of the test's own):
// see crashRestartStorm.
func TestProcessNodeLockCrashRestart(t *testing.T) {
	t.Parallel()
	bin := buildApp(t)
	for _, transport := range []string{"inprocess", "postgres", "nats"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			crashRestartStorm(t, bin, transport, []string{"a", "b"}, signups("crash", 20, 20))
		})
	}
}

// crashRestartStorm starts serve nodes with the names, with -transport
// transport (for nats, on a NATS server of the test's own), on a private
// PostgreSQL cluster, and crashes and restarts the
// cluster (pg_ctl restart -m immediate) once a storm of the sign-ups ups
// over the nodes has had 40 answers: during the outage every failure is a
// 503 unavailable, on every node (never a 504 nor another 5xx); each node
// loses the lock on its name, answers 503 meanwhile, and retakes it
// without help, and takes commands again (the time until every node has
// taken one is logged); afterwards nothing is left locked but the names,
// and a process named like a live node still exits 1.
func crashRestartStorm(t *testing.T, bin, transport string, names []string, ups []signup) {
	t.Helper()
	cluster := pgtest.NewCluster(t)
	flags := []string{"-transport", transport}
	if transport == "nats" {
		flags = append(flags, "-nats-url", natstest.Start(t).URL())
	}
	nodes := startNodes(t, bin, cluster.DSN(), names, flags...)
	c := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()

	crash := make(chan struct{})
	var out []outcome
	var wg sync.WaitGroup
	wg.Go(func() {
		out = storm(ctx, c, urls(nodes...), ups,
			stormConfig{workers: 8, afterN: 40, after: func() { close(crash) }})
	})
	// The storm ends with the test, whichever way the test ends.
	defer func() { cancel(); wg.Wait() }()
	select {
	case <-crash:
	case <-ctx.Done():
		t.Fatal("the storm never got 40 answers")
	}
	start := time.Now()
	require.NoError(t, cluster.CrashRestart(ctx))
	restarted := time.Since(start)
	// Every node serves again and takes a command: a sign-up answered
	// 503 (a pooled connection the crash killed is only found dead when
	// used) is tried again, as its Retry-After says; one that ran although
	// it was answered 503 is replayed (200).
	for _, p := range nodes {
		waitHealthy(t, c, p.url)
		up := signup{StaffID: "after-" + p.name, Email: "after-" + p.name + "@example.org", Name: "After"}
		var r answer
		eventually(t, func() bool {
			r = post(ctx, c, p.url+"/staff", up)
			return r.Err != nil || r.Status != http.StatusServiceUnavailable
		}, "node %s takes a sign-up", p.name)
		require.NoError(t, r.Err)
		require.Contains(t, []int{http.StatusCreated, http.StatusOK}, r.Status, "node %s: %v", p.name, r.Body)
	}
	t.Logf("recovery: %s, %d nodes: every node takes commands again %v after the crash (the cluster took %v to crash and restart)",
		transport, len(nodes), time.Since(start).Round(time.Millisecond), restarted.Round(time.Millisecond))
	wg.Wait()

	var unavailable int
	for _, o := range out {
		require.NoError(t, o.answer.Err, "%s", o.Email)
		if o.answer.Status == http.StatusServiceUnavailable {
			unavailable++
			require.Equal(t, "unavailable", o.answer.str("code"), "%v", o.answer.Body)
			continue
		}
		require.Less(t, o.answer.Status, 500, "no 5xx but 503: %s on node %s: %v", o.Email, names[o.node], o.answer.Body)
	}
	t.Logf("%d of %d sign-ups answered 503 during the outage", unavailable, len(out))
	require.Positive(t, unavailable, "the storm ran into the outage: the check above saw it")

	// Nothing is left locked but the node names, as every node sees it.
	want := map[string]bool{}
	for _, name := range names {
		want[name] = true
	}
	for _, p := range nodes {
		var ls []map[string]any
		eventually(t, func() bool {
			ls = getLocksOf(t, ctx, c, p.url+"/locks")
			return len(ls) == len(names)
		}, "node %s lists %d locks", p.name, len(names))
		held := map[string]bool{}
		for _, l := range ls {
			require.Equal(t, "example.node", l["namespace"], "%v", ls)
			held[l["node"].(string)] = true
		}
		require.Equal(t, want, held, "%v", ls)
		one := getLocksOf(t, ctx, c, p.url+"/locks?namespace=example.node&id="+names[0])
		require.Len(t, one, 1)
		require.Equal(t, names[0], one[0]["node"])
	}

	// The names are still exclusive.
	dup := startProcess(t, bin, cluster.DSN(), names[0], flags...)
	select {
	case <-dup.done:
	case <-time.After(deadline):
		t.Fatalf("another node named %s keeps running", names[0])
	}
	require.Equal(t, 1, dup.cmd.ProcessState.ExitCode())
	require.True(t, strings.HasPrefix(dup.out.String(), `example_app serve: another live node is named "`+names[0]+`" on this database`), "%s", dup.out.String())

	var logs strings.Builder
	for _, p := range nodes {
		logs.WriteString(p.out.String())
	}
	require.Contains(t, logs.String(), "the node lost the lock on its name",
		"and the crash took the name locks: the test saw the loss")
	for _, p := range nodes {
		p.requireCleanExit(t)
	}
}

// getLocksOf fetches a GET /locks URL: a JSON array.
func getLocksOf(t *testing.T, ctx context.Context, c *http.Client, url string) []map[string]any {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var ls []map[string]any
	require.NoError(t, jsonDecode(resp, &ls))
	return ls
}

// A second embedded serve (no -db) on the -data file of a running one
// exits 1 with one line naming the file; the first keeps serving.
func TestProcessEmbeddedFileInUse(t *testing.T) {
	t.Parallel()
	bin := buildApp(t)
	dir := t.TempDir()
	first := startEmbedded(t, bin, dir, "claimbus.db")
	c := newClient(t)
	waitHealthy(t, c, first.url)

	second := startEmbedded(t, bin, dir, "claimbus.db")
	select {
	case <-second.done:
	case <-time.After(deadline):
		t.Fatal("a second embedded serve on the same file keeps running")
	}
	require.Equal(t, 1, second.cmd.ProcessState.ExitCode())
	line, _, _ := strings.Cut(second.out.String(), "\n")
	require.Equal(t, "example_app serve: another example_app is serving claimbus.db: one process per -data file (stop it, or give another -data)", line)

	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	r := post(ctx, c, first.url+"/staff", signup{StaffID: "s-1", Email: "ann@example.org", Name: "Ann"})
	require.NoError(t, r.Err)
	require.Equal(t, http.StatusCreated, r.Status, "%v", r.Body)
	first.requireCleanExit(t)
	_, err := os.Stat(filepath.Join(dir, "claimbus.db"))
	require.NoError(t, err, "the default -data file is in the working directory")
}

// startEmbedded starts `serve -data data` without -db (nor DATABASE_URL)
// in dir, and waits until it listens unless it is refused.
func startEmbedded(t *testing.T, bin, dir, data string) *process {
	t.Helper()
	p := &process{name: "local", cmd: exec.Command(bin, "serve", "-addr", "127.0.0.1:0", "-data", data)}
	p.cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DATABASE_URL=") {
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	spawn(t, p)
	eventually(t, func() bool {
		select {
		case <-p.done:
			return true
		default:
		}
		if m := listening.FindStringSubmatch(p.out.String()); m != nil {
			p.url = m[1]
			return true
		}
		return false
	}, "the embedded node listens or exits")
	return p
}

// jsonDecode decodes resp's body into v.
func jsonDecode(resp *http.Response, v any) error { return json.NewDecoder(resp.Body).Decode(v) }
