package app_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	cspg "github.com/claimbus/claimbus/claimstore/postgres"
	cssqlite "github.com/claimbus/claimbus/claimstore/sqlite"
	"github.com/claimbus/claimbus/example_app/app"
	"github.com/claimbus/claimbus/internal/pgtest"
)

// stormLag is the projection lag of the events-model tests.
const stormLag = 300 * time.Millisecond

// eventsConfig is the configuration of a node on the events staff model
// with stormLag, reservations on unless disabled.
func eventsConfig(disableReservations bool) app.Config {
	return app.Config{StaffModel: app.StaffEvents, ProjectionLag: stormLag, DisableReservations: disableReservations}
}

// randomCase returns s with each letter upper or lower case at random.
func randomCase(s string) string {
	var b strings.Builder
	for _, r := range s {
		if rand.IntN(2) == 0 {
			b.WriteString(strings.ToUpper(string(r)))
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// postStaff sends POST /staff with body and, when key is not "", an
// Idempotency-Key header.
func postStaff(t *testing.T, url, key, body string) response {
	t.Helper()
	return sendWith(t, http.MethodPost, url+"/staff", body, staffHeader(key))
}

// postStaffAsync is postStaff for a goroutine other than the test's: it
// asserts nothing, and the test checks its error and calls checkStaff.
func postStaffAsync(url, key, body string) (response, error) {
	return exchange(http.MethodPost, url+"/staff", body, staffHeader(key))
}

// checkStaff is the check postStaff makes, for an answer of postStaffAsync.
func checkStaff(t *testing.T, url string, r response, err error) {
	t.Helper()
	require.NoError(t, err)
	checkResponse(t, http.MethodPost, url+"/staff", r)
}

// staffHeader is the headers of a sign-up with Idempotency-Key key (none
// when key is empty).
func staffHeader(key string) http.Header {
	if key == "" {
		return nil
	}
	return http.Header{app.IdempotencyKeyHeader: {key}}
}

// signUpStorm sends copies sign-ups of each of emails addresses at once, in
// random case and each with its own staff id, spread over urls, and returns
// the statuses counted.
func signUpStorm(t *testing.T, urls []string, emails, copies int) map[int]int {
	t.Helper()
	type answer struct {
		url string
		r   response
		err error
	}
	answers := make([]answer, emails*copies)
	var wg sync.WaitGroup
	for e := range emails {
		for c := range copies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				body := fmt.Sprintf(`{"staff_id":"s-%d-%d","email":%q,"name":"Person %d"}`, e, c, randomCase(fmt.Sprintf("person%d@example.org", e)), e)
				a := &answers[e*copies+c]
				a.url = urls[(e+c)%len(urls)]
				a.r, a.err = postStaffAsync(a.url, "", body)
			}()
		}
	}
	wg.Wait()
	statuses := map[int]int{}
	for _, a := range answers {
		checkStaff(t, a.url, a.r, a.err)
		statuses[a.r.status]++
	}
	return statuses
}

// An event-sourced storm on two nodes sharing one PostgreSQL database,
// whose projections show a sign-up stormLag after it: with reservations
// exactly one StaffRegistered per address and the backstop never fires,
// and the sweeper then empties the reservations; without them the same
// storm registers addresses twice, and the read model's unique index
// catches the duplicates (so the test can fail).
func TestEventsStormTwoNodes(t *testing.T) {
	t.Parallel()
	const emails, copies = 12, 6
	for _, reserve := range []bool{true, false} {
		t.Run(map[bool]string{true: "reservations", false: "no reservations"}[reserve], func(t *testing.T) {
			t.Parallel()
			dsn := pgtest.DSN(t)
			a, aURL := pgNode(t, dsn, "pg-a", "inprocess", eventsConfig(!reserve))
			b, bURL := pgNode(t, dsn, "pg-b", "inprocess", eventsConfig(!reserve))
			durable, err := cspg.New(t.Context(), pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 1, ApplicationName: "check"}), cspg.Config{})
			require.NoError(t, err)
			require.IsType(t, durable, a.Claims(), "the reservations are durable, shared in the database")
			statuses := signUpStorm(t, []string{aURL, bURL}, emails, copies)
			ctx := t.Context()
			require.NoError(t, a.WaitProjected(ctx))
			require.NoError(t, b.WaitProjected(ctx))

			registered, err := a.StaffRegistrations(ctx, "")
			require.NoError(t, err)
			backstops := a.BackstopViolations() + b.BackstopViolations()
			require.Equal(t, emails, staffCount(t, a), "the read model holds one member per address either way")
			if !reserve {
				t.Logf("without reservations: %d StaffRegistered for %d addresses, %d caught by the backstop", registered, emails, backstops)
				require.Greater(t, registered, emails, "without reservations a lagging read model lets duplicates through")
				require.EqualValues(t, registered-emails, backstops, "the backstop caught every duplicate")
				return
			}
			require.Equal(t, map[int]int{http.StatusCreated: emails, http.StatusConflict: emails * (copies - 1)}, statuses)
			for e := range emails {
				n, err := b.StaffRegistrations(ctx, fmt.Sprintf("PERSON%d@example.org", e))
				require.NoError(t, err)
				require.Equal(t, 1, n, "one StaffRegistered for person%d", e)
			}
			require.Zero(t, backstops)
			reservations, err := a.Claims().List(ctx, app.NamespaceStaffEmail, "", 1000)
			require.NoError(t, err)
			require.NotEmpty(t, reservations, "the reservations outlive the requests until swept")
			res, err := b.Sweep(ctx)
			require.NoError(t, err)
			require.Equal(t, len(reservations), res.Dropped, "the read model shows every reserved address")
			reservations, err = a.Claims().List(ctx, app.NamespaceStaffEmail, "", 1000)
			require.NoError(t, err)
			require.Empty(t, reservations, "after the projection caught up and a sweep, no reservation is left")
		})
	}
}

// The events model on SQLite: a sign-up is answered at once and shows in
// the read model after the projection; another of its address is taken
// while the read model lags; a repeat of its Idempotency-Key gets its
// answer. The event, the reservation and the outcome commit together.
func TestEventsModelSQLite(t *testing.T) {
	t.Parallel()
	node, store, url := sqliteNode(t, eventsConfig(false))
	require.Equal(t, app.StaffEvents, node.StaffModel())
	db, _ := sqliteStore(t)
	durable, err := cssqlite.New(t.Context(), db, cssqlite.Config{})
	require.NoError(t, err)
	require.IsType(t, durable, node.Claims(), "the reservations are durable, in the node's database")
	first := postStaff(t, url, "key-1", `{"staff_id":"s-1","email":"Ann@Example.org","name":"Ann"}`)
	require.Equal(t, http.StatusCreated, first.status, "%s", first.raw)
	require.JSONEq(t, `{"staff_id":"s-1","email":"ann@example.org","name":"Ann"}`, string(first.raw))
	var rows [3]int
	require.NoError(t, store.DB().QueryRow(`SELECT (SELECT count(*) FROM staff_event WHERE email = 'ann@example.org'),
		(SELECT count(*) FROM claimbus_reservation WHERE id = 'ann@example.org' AND confirmed),
		(SELECT count(*) FROM claimbus_outcome WHERE id = 'key-1')`).Scan(&rows[0], &rows[1], &rows[2]))
	require.Equal(t, [3]int{1, 1, 1}, rows)

	taken := postStaff(t, url, "", `{"staff_id":"s-2","email":"ANN@example.org","name":"Ann"}`)
	require.Equal(t, http.StatusConflict, taken.status, "%s", taken.raw)
	require.JSONEq(t, `{"code":"already_taken","field":"email","message":"email is already taken"}`, string(taken.raw))

	again := postStaff(t, url, "key-1", `{"staff_id":"s-1","email":"Ann@Example.org","name":"Ann"}`)
	require.Equal(t, first.status, again.status, "%s", again.raw)
	require.JSONEq(t, string(first.raw), string(again.raw))
	conflicting := postStaff(t, url, "key-1", `{"staff_id":"s-1","email":"ann@example.org","name":"Anna"}`)
	require.Equal(t, http.StatusConflict, conflicting.status)
	require.Equal(t, "idempotency_conflict", decodeCode(t, conflicting.raw))

	require.NoError(t, node.WaitProjected(t.Context()))
	got := send(t, "GET", url+"/staff/s-1", "")
	require.Equal(t, http.StatusOK, got.status)
	require.JSONEq(t, string(first.raw), string(got.raw))
	n, err := node.StaffRegistrations(t.Context(), "ann@example.org")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Zero(t, node.BackstopViolations())
}

// A node refuses the events model's fields in the table model; any
// projection lag suits the events model, whose reservations commit with
// its events (none is ever in doubt, so none expires).
func TestEventsConfigValidate(t *testing.T) {
	t.Parallel()
	require.EqualError(t, app.Config{StaffModel: app.StaffEvents, ProjectionLag: time.Hour}.Validate(), app.ErrNilBackend.Error(), "nothing but the missing backend")
	require.ErrorContains(t, app.Config{ProjectionLag: time.Second}.Validate(), "are for the events staff model")
	require.ErrorContains(t, app.Config{StaffModel: "ledger"}.Validate(), `Config.StaffModel "ledger"`)
	require.ErrorContains(t, app.Config{StaffModel: app.StaffEvents, ProjectionLag: -1}.Validate(), "Config.ProjectionLag is negative")
}

// decodeCode returns the code of a failure's body.
func decodeCode(t *testing.T, raw []byte) string {
	t.Helper()
	var body struct{ Code string }
	require.NoError(t, json.Unmarshal(raw, &body), "%s", raw)
	return body.Code
}

// A node that dies between an event's append and its projection leaves the
// read model without that member: the next node to start on the database
// applies it, in append order (so of two events of one address, as without
// reservations, the first), and a node starting later applies nothing
// again.
func TestEventsCatchUpAtStart(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db, store := sqliteStore(t)
	start := func() *app.Node {
		cfg := eventsConfig(false)
		cfg.Backend = app.SQLiteBackend(store)
		node, err := app.New(ctx, cfg)
		require.NoError(t, err)
		return node
	}
	first := start()
	require.NoError(t, first.Close())

	// What a node killed after its appends left: two events of one address
	// (as without reservations) and one of another, none projected.
	at := time.Now().Add(-time.Hour).UnixNano()
	for i, ev := range [][3]string{{"e-1", "s-1", "ann@example.org"}, {"e-2", "s-2", "ann@example.org"}, {"e-3", "s-3", "bob@example.org"}} {
		_, err := db.ExecContext(ctx, `INSERT INTO staff_event (event_id, staff_id, email, name, command_id, recorded_at) VALUES ($1, $2, $3, 'X', 'c', $4)`,
			ev[0], ev[1], ev[2], at+int64(i))
		require.NoError(t, err)
	}

	second := start()
	require.NoError(t, second.WaitProjected(ctx))
	for id, email := range map[string]string{"s-1": "ann@example.org", "s-3": "bob@example.org"} {
		s, err := second.Staff(ctx, id)
		require.NoError(t, err, id)
		require.Equal(t, email, s.Email)
	}
	_, err := second.Staff(ctx, "s-2")
	require.Error(t, err, "the duplicate stays out of the read model: once the first of its address is applied, it is skipped")
	n, err := second.StaffCount(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.NoError(t, second.Close())

	third := start()
	require.NoError(t, third.WaitProjected(ctx))
	n, err = third.StaffCount(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, n, "nothing is applied twice")
	require.Zero(t, third.BackstopViolations(), "nor is the skipped duplicate tried again")
	require.NoError(t, third.Close())
}

// The events model on PostgreSQL commits a sign-up in one transaction:
// once POST /staff answers, the event, the email's reservation and the
// Idempotency-Key's outcome are in the database; a repeat of the key gets
// the same answer, and with a projection stalled another sign-up of the
// email is refused by the reservation.
func TestEventsModelCommitsInOneTransaction(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	_, url := pgNode(t, dsn, "pg-tx", "inprocess", app.Config{StaffModel: app.StaffEvents, ProjectionLag: time.Minute})
	first := postStaff(t, url, "key-1", `{"staff_id":"s-1","email":"Tx@Example.org","name":"Tx"}`)
	require.Equal(t, http.StatusCreated, first.status, "%s", first.raw)
	check := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 1, ApplicationName: "check"})
	var events, reservations, outcomes int
	require.NoError(t, check.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM staff_event WHERE email = 'tx@example.org'),
		(SELECT count(*) FROM claimbus.claim_reservation WHERE id = 'tx@example.org' AND confirmed),
		(SELECT count(*) FROM claimbus.claim_outcome WHERE id = 'key-1')`).Scan(&events, &reservations, &outcomes))
	require.Equal(t, [3]int{1, 1, 1}, [3]int{events, reservations, outcomes})

	again := postStaff(t, url, "key-1", `{"staff_id":"s-1","email":"Tx@Example.org","name":"Tx"}`)
	require.Equal(t, first.status, again.status)
	require.JSONEq(t, string(first.raw), string(again.raw))
	other := postStaff(t, url, "key-2", `{"staff_id":"s-2","email":"tx@example.org","name":"Tx"}`)
	require.Equal(t, http.StatusConflict, other.status, "%s", other.raw)
	require.Equal(t, "already_taken", other.body["code"])
}
