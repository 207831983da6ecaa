package txcommand_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/commands"
	"github.com/claimbus/claimbus/internal/faultproxy"
	"github.com/claimbus/claimbus/middleware"
	"github.com/claimbus/claimbus/txcommand"
)

// stormEmail returns the email of the i-th command of a storm: a new
// email every few commands, so that the faults always hit emails in
// contention.
func stormEmail(i int64) string { return fmt.Sprintf("storm%d@x.org", i/6) }

// stormChild is the child process of the storm: it sends commands for the
// storm's emails, one after the other, until it is killed.
func stormChild(ctx context.Context, m *txcommand.Middleware) int {
	r, err := middleware.NewRunner(middleware.RunnerConfig{Middleware: []middleware.Middleware{m}, FailureLog: middleware.FailureLog{Off: true}})
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Println("storming")
	for i := int64(0); ; i += 3 {
		id := uuid.NewString()
		p := middleware.NewPipeline(ctx, &commands.CreateStaff{StaffID: "staff-" + id, Email: stormEmail(i), Name: "N"})
		p.CommandName, p.CommandUUID = "commands.CreateStaff", id
		_, _ = r.Run(ctx, p, register)
	}
}

// TestStormUnderFaults runs an event-sourced storm over four nodes whose
// read model never catches up (a projection stalled for the whole test,
// longer than any maxLag would be): two nodes in process, one whose
// network to PostgreSQL is black-holed mid-storm and then healed, and one
// child process killed (kill -9) mid-storm. Every email has at most one
// StaffRegistered; every success committed its event; every
// already_taken names an email taken in the committed state.
func TestStormUnderFaults(t *testing.T) {
	dsn := newDB(t)
	cfg := fullConfig()
	cfg.ClaimTimeout = 3 * time.Second
	a, b := newNode(t, dsn, "node-a", cfg), newNode(t, dsn, "node-b", cfg)
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	proxy, err := faultproxy.New(u.Host)
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	u.Host = proxy.Addr()
	c := newNodeWith(t, u.String(), "node-c", cfg, 2*time.Second)

	child := startChild(t, childDSN+"="+dsn, "storm", "storming")

	type answer struct {
		staff, email string
		err          error
	}
	var mu sync.Mutex
	var answers []answer
	var wg sync.WaitGroup
	var next atomic.Int64
	var answered [3]atomic.Int64 // by node: a, b, c
	stop := make(chan struct{})
	for w := range 12 {
		e := []*env{a, b, c}[w%3]
		wg.Go(func() {
			for {
				i := next.Add(1)
				select {
				case <-stop:
					return
				default:
				}
				id := uuid.NewString()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := e.send(ctx, id, stormEmail(i), register)
				cancel()
				mu.Lock()
				answers = append(answers, answer{"staff-" + id, stormEmail(i), err})
				mu.Unlock()
				answered[w%3].Add(1)
			}
		})
	}
	// grows waits until node i has answered n more commands.
	grows := func(i int, n int64, what string) {
		t.Helper()
		from := answered[i].Load()
		require.Eventually(t, func() bool { return answered[i].Load() >= from+n }, 60*time.Second, 5*time.Millisecond, what)
	}
	grows(0, 100, "the storm runs before the faults")
	require.NoError(t, child.Process.Kill())
	_ = child.Wait()
	proxy.BlackHole()
	// Node c's commands hang, their locks held at the server, until its
	// sessions time out (2 s); the others go on meanwhile.
	grows(0, 300, "node a goes on while node c is cut off")
	proxy.Heal()
	grows(2, 20, "node c recovers once healed")
	close(stop)
	wg.Wait()

	ctx := context.Background()
	committed := map[string]string{} // email → staff
	rows, err := a.pool.Query(ctx, "SELECT id, email FROM staff_events")
	require.NoError(t, err)
	for rows.Next() {
		var id, email string
		require.NoError(t, rows.Scan(&id, &email))
		require.NotContains(t, committed, email, "a second StaffRegistered for %s", email)
		committed[email] = id
	}
	require.NoError(t, rows.Err())
	var ok, taken, other int
	for _, an := range answers {
		switch {
		case an.err == nil:
			ok++
			require.Equal(t, an.staff, committed[an.email], "a success whose event did not commit")
		case errors.Is(an.err, middleware.ErrAlreadyTaken):
			taken++
			require.Contains(t, committed, an.email, "already_taken for an email nobody has")
		default:
			other++
		}
	}
	t.Logf("answers: %d ok, %d already_taken, %d other; %d emails taken", ok, taken, other, len(committed))
	require.Positive(t, taken)
	// The backstop: the read model's unique index refuses nothing when
	// the events are projected.
	_, err = a.pool.Exec(ctx, "INSERT INTO staff_read SELECT id, email FROM staff_events")
	require.NoError(t, err)
}
