// Package claimstoretest is the conformance suite every claimstore backend
// passes: call Run from a test of the backend's package.
package claimstoretest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/claimstore"
	"github.com/claimbus/claimbus/lockstore"
)

// Timeout bounds every wait of the suite.
const Timeout = 10 * time.Second

// runID keeps the namespaces of one test binary apart from those of another
// running at the same time against the same database.
var runID = func() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}()

var nsSeq atomic.Int64

// namespace returns a namespace no other test uses.
func namespace() string { return fmt.Sprintf("cst.%s.%d", runID, nsSeq.Add(1)) }

// NewFunc returns a store for one subtest. Stores made by one call of Run
// may share their database: the suite keeps the keys of each subtest apart.
type NewFunc func(t *testing.T) claimstore.Store

// Run runs the conformance suite against the stores newStore makes.
func Run(t *testing.T, newStore NewFunc) {
	tests := []struct {
		name string
		fn   func(t *testing.T, ctx context.Context, s claimstore.Store, ns string)
	}{
		{"ReserveFree", testReserveFree},
		{"ReserveHeldPending", testReserveHeldPending},
		{"ReserveInDoubtHandedOver", testReserveInDoubtHandedOver},
		{"ReserveConfirmedNeverHandedOver", testReserveConfirmedNeverHandedOver},
		{"ReserveOwnAgain", testReserveOwnAgain},
		{"Confirm", testConfirm},
		{"Cancel", testCancel},
		{"Drop", testDrop},
		{"List", testList},
		{"ConcurrentReserve", testConcurrentReserve},
		{"ManyKeys", testManyKeys},
		{"Outcome", testOutcome},
		{"OutcomeRetention", testOutcomeRetention},
		{"PurgeOutcomes", testPurgeOutcomes},
		{"Invalid", testInvalid},
		{"DoneContext", testDoneContext},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			require.NotNil(t, s, "the store constructor returned nil")
			ctx, cancel := context.WithTimeout(t.Context(), Timeout)
			defer cancel()
			tc.fn(t, ctx, s, namespace())
		})
	}
}

func key(ns, id string) lockstore.Key { return lockstore.Key{Namespace: ns, ID: id} }

func reserve(t *testing.T, ctx context.Context, s claimstore.Store, k lockstore.Key, owner string, maxLag time.Duration) (claimstore.Reservation, bool) {
	t.Helper()
	held, ok, err := s.Reserve(ctx, k, owner, maxLag)
	require.NoError(t, err)
	return held, ok
}

// list returns every reservation in ns.
func list(t *testing.T, ctx context.Context, s claimstore.Store, ns string) []claimstore.Reservation {
	t.Helper()
	rs, err := s.List(ctx, ns, "", 1000)
	require.NoError(t, err)
	return rs
}

func testReserveFree(t *testing.T, ctx context.Context, s claimstore.Store, ns string) {
	k := key(ns, "ann@example.org")
	_, ok := reserve(t, ctx, s, k, "cmd-1", time.Hour)
	require.True(t, ok, "a free value is reserved")
	rs := list(t, ctx, s, ns)
	require.Len(t, rs, 1)
	require.Equal(t, k, rs[0].Key)
	require.Equal(t, "cmd-1", rs[0].Owner)
	require.False(t, rs[0].Confirmed, "a new reservation is pending")
	require.Less(t, rs[0].Age, time.Minute)
	require.GreaterOrEqual(t, rs[0].Age, time.Duration(0))
}

func testReserveHeldPending(t *testing.T, ctx context.Context, s claimstore.Store, ns string) {
	k := key(ns, "v")
	_, ok := reserve(t, ctx, s, k, "first", time.Hour)
	require.True(t, ok)
	held, ok := reserve(t, ctx, s, k, "second", time.Hour)
	require.False(t, ok, "a pending reservation younger than maxLag holds the value")
	require.Equal(t, "first", held.Owner)
	require.Equal(t, k, held.Key)
	require.False(t, held.Confirmed)
	require.Equal(t, "first", list(t, ctx, s, ns)[0].Owner, "nothing was written")
}

func testReserveInDoubtHandedOver(t *testing.T, ctx context.Context, s claimstore.Store, ns string) {
	k := key(ns, "v")
	_, ok := reserve(t, ctx, s, k, "gone", time.Hour)
	require.True(t, ok)
	// Past maxLag (any age reaches a nanosecond) the reservation in doubt
	// is handed over.
	require.Eventually(t, func() bool {
		_, ok := reserve(t, ctx, s, k, "next", time.Nanosecond)
		return ok
	}, Timeout, time.Millisecond)
	rs := list(t, ctx, s, ns)
	require.Len(t, rs, 1)
	require.Equal(t, "next", rs[0].Owner)
	require.False(t, rs[0].Confirmed)
	// The new owner's reservation holds against the old one.
	held, ok := reserve(t, ctx, s, k, "gone", time.Hour)
	require.False(t, ok)
	require.Equal(t, "next", held.Owner)
}

func testReserveConfirmedNeverHandedOver(t *testing.T, ctx context.Context, s claimstore.Store, ns string) {
	k := key(ns, "v")
	_, ok := reserve(t, ctx, s, k, "first", time.Hour)
	require.True(t, ok)
	require.NoError(t, s.Confirm(ctx, k, "first"))
	for _, lag := range []time.Duration{0, time.Nanosecond, time.Hour} {
		held, ok := reserve(t, ctx, s, k, "second", lag)
		require.False(t, ok, "maxLag %v", lag)
		require.True(t, held.Confirmed)
		require.Equal(t, "first", held.Owner)
	}
}

func testReserveOwnAgain(t *testing.T, ctx context.Context, s claimstore.Store, ns string) {
	k := key(ns, "v")
	_, ok := reserve(t, ctx, s, k, "cmd", time.Hour)
	require.True(t, ok)
	require.NoError(t, s.Confirm(ctx, k, "cmd"))
	held, ok := reserve(t, ctx, s, k, "cmd", time.Hour)
	require.True(t, ok, "a redelivered command reserves its own value again")
	require.Equal(t, "cmd", held.Owner, "reported as its own earlier reservation")
	require.True(t, held.Confirmed)
	rs := list(t, ctx, s, ns)
	require.Len(t, rs, 1)
	require.True(t, rs[0].Confirmed, "kept confirmed: the earlier run wrote the value")
	require.NoError(t, s.Cancel(ctx, k, "cmd"))
	require.Len(t, list(t, ctx, s, ns), 1, "and a cancel leaves a confirmed reservation")

	// A pending one of its own is kept pending, and reported so.
	p := key(ns, "pending")
	_, ok = reserve(t, ctx, s, p, "cmd", time.Hour)
	require.True(t, ok)
	held, ok = reserve(t, ctx, s, p, "cmd", time.Hour)
	require.True(t, ok)
	require.Equal(t, claimstore.Reservation{Key: p, Owner: "cmd"}, held)
	// A fresh reservation reports no earlier one.
	held, ok = reserve(t, ctx, s, key(ns, "fresh"), "cmd", time.Hour)
	require.True(t, ok)
	require.Zero(t, held)
}

func testConfirm(t *testing.T, ctx context.Context, s claimstore.Store, ns string) {
	k := key(ns, "v")
	require.ErrorIs(t, s.Confirm(ctx, k, "cmd"), claimstore.ErrNotReserved, "nothing reserved")
	_, ok := reserve(t, ctx, s, k, "cmd", time.Hour)
	require.True(t, ok)
	require.ErrorIs(t, s.Confirm(ctx, k, "other"), claimstore.ErrNotReserved, "another owner's")
	require.NoError(t, s.Confirm(ctx, k, "cmd"))
	require.NoError(t, s.Confirm(ctx, k, "cmd"), "confirming twice is fine")
	rs := list(t, ctx, s, ns)
	require.Len(t, rs, 1)
	require.True(t, rs[0].Confirmed)
	require.Equal(t, "cmd", rs[0].Owner)
}

func testCancel(t *testing.T, ctx context.Context, s claimstore.Store, ns string) {
	k := key(ns, "v")
	require.NoError(t, s.Cancel(ctx, k, "cmd"), "nothing to cancel")
	_, ok := reserve(t, ctx, s, k, "cmd", time.Hour)
	require.True(t, ok)
	require.NoError(t, s.Cancel(ctx, k, "other"))
	require.Len(t, list(t, ctx, s, ns), 1, "another owner cannot cancel it")
	require.NoError(t, s.Cancel(ctx, k, "cmd"))
	require.Empty(t, list(t, ctx, s, ns), "cancelled")
	_, ok = reserve(t, ctx, s, k, "next", time.Hour)
	require.True(t, ok, "a cancelled value is free at once")

	require.NoError(t, s.Confirm(ctx, k, "next"))
	require.NoError(t, s.Cancel(ctx, k, "next"))
	rs := list(t, ctx, s, ns)
	require.Len(t, rs, 1, "a confirmed reservation is not cancelled")
	require.True(t, rs[0].Confirmed)
}

func testDrop(t *testing.T, ctx context.Context, s claimstore.Store, ns string) {
	a, b := key(ns, "a"), key(ns, "b")
	require.NoError(t, s.Drop(ctx, a), "nothing to drop")
	_, ok := reserve(t, ctx, s, a, "x", time.Hour)
	require.True(t, ok)
	_, ok = reserve(t, ctx, s, b, "y", time.Hour)
	require.True(t, ok)
	require.NoError(t, s.Confirm(ctx, a, "x"))
	require.NoError(t, s.Drop(ctx, a))
	require.NoError(t, s.Drop(ctx, b))
	require.Empty(t, list(t, ctx, s, ns), "confirmed and pending both dropped")
	_, ok = reserve(t, ctx, s, a, "z", time.Hour)
	require.True(t, ok, "a dropped value is free")
}

func testList(t *testing.T, ctx context.Context, s claimstore.Store, ns string) {
	other := namespace()
	const n = 25
	for i := range n {
		_, ok := reserve(t, ctx, s, key(ns, fmt.Sprintf("v%02d", i)), "o"+strconv.Itoa(i), time.Hour)
		require.True(t, ok)
	}
	_, ok := reserve(t, ctx, s, key(other, "elsewhere"), "o", time.Hour)
	require.True(t, ok)
	var got []string
	after := ""
	for {
		page, err := s.List(ctx, ns, after, 10)
		require.NoError(t, err)
		require.LessOrEqual(t, len(page), 10)
		if len(page) == 0 {
			break
		}
		for _, r := range page {
			require.Equal(t, ns, r.Key.Namespace)
			got = append(got, r.Key.ID)
		}
		after = page[len(page)-1].Key.ID
	}
	require.Len(t, got, n)
	for i, id := range got {
		require.Equal(t, fmt.Sprintf("v%02d", i), id, "in ID order, each once")
	}
	empty, err := s.List(ctx, namespace(), "", 10)
	require.NoError(t, err)
	require.Empty(t, empty)
}

// Many owners reserve one value at once; only one gets it. (Reservations
// are written under a claim, so this never happens in use: the store must
// still not let two in.)
func testConcurrentReserve(t *testing.T, ctx context.Context, s claimstore.Store, ns string) {
	k := key(ns, "contended")
	const n = 32
	var won atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			_, ok, err := s.Reserve(ctx, k, "o"+strconv.Itoa(i), time.Hour)
			if err != nil {
				errs <- err
				return
			}
			if ok {
				won.Add(1)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, int32(1), won.Load())
}

// Many goroutines reserve, confirm and cancel distinct values at once, as
// the commands of a storm do.
func testManyKeys(t *testing.T, ctx context.Context, s claimstore.Store, ns string) {
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			k, owner := key(ns, "v"+strconv.Itoa(i)), "o"+strconv.Itoa(i)
			_, ok, err := s.Reserve(ctx, k, owner, time.Hour)
			switch {
			case err != nil:
				errs <- err
			case !ok:
				errs <- fmt.Errorf("%s not reserved", k)
			case i%2 == 0:
				errs <- s.Confirm(ctx, k, owner)
			default:
				errs <- s.Cancel(ctx, k, owner)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	rs := list(t, ctx, s, ns)
	require.Len(t, rs, n/2)
	for _, r := range rs {
		require.True(t, r.Confirmed, "%v", r)
	}
}

func testOutcome(t *testing.T, ctx context.Context, s claimstore.Store, ns string) {
	k := key(ns, "cmd-1")
	_, ok, err := s.Outcome(ctx, k)
	require.NoError(t, err)
	require.False(t, ok)
	res := claimstore.Outcome{Fingerprint: []byte{1, 2, 3}, Result: []byte(`{"id":"a"}`)}
	require.NoError(t, s.SaveOutcome(ctx, k, res, time.Hour))
	got, ok, err := s.Outcome(ctx, k)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, res.Fingerprint, got.Fingerprint)
	require.JSONEq(t, string(res.Result), string(got.Result))
	require.Empty(t, got.Err)

	rej := claimstore.Outcome{Fingerprint: []byte{4}, Err: []byte(`{"code":"already_taken"}`)}
	require.NoError(t, s.SaveOutcome(ctx, k, rej, time.Hour), "a save replaces the outcome")
	got, ok, err = s.Outcome(ctx, k)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, rej.Err, got.Err)
	require.Empty(t, got.Result)
	require.Equal(t, rej.Fingerprint, got.Fingerprint)

	_, ok, err = s.Outcome(ctx, key(ns, "cmd-2"))
	require.NoError(t, err)
	require.False(t, ok, "outcomes are per key")
}

func testOutcomeRetention(t *testing.T, ctx context.Context, s claimstore.Store, ns string) {
	k := key(ns, "short")
	require.NoError(t, s.SaveOutcome(ctx, k, claimstore.Outcome{Fingerprint: []byte{1}, Result: []byte(`1`)}, time.Millisecond))
	require.Eventually(t, func() bool {
		_, ok, err := s.Outcome(ctx, k)
		require.NoError(t, err)
		return !ok
	}, Timeout, time.Millisecond, "an outcome past its retention is not found")
}

func testPurgeOutcomes(t *testing.T, ctx context.Context, s claimstore.Store, ns string) {
	keep := key(ns, "keep")
	require.NoError(t, s.SaveOutcome(ctx, keep, claimstore.Outcome{Fingerprint: []byte{1}, Result: []byte(`1`)}, time.Hour))
	for i := range 5 {
		require.NoError(t, s.SaveOutcome(ctx, key(ns, "old"+strconv.Itoa(i)),
			claimstore.Outcome{Fingerprint: []byte{1}, Result: []byte(`1`)}, time.Millisecond))
	}
	// Other tests' outcomes may expire too: count only until these are
	// gone.
	require.Eventually(t, func() bool {
		for i := range 5 {
			if _, ok, err := s.Outcome(ctx, key(ns, "old"+strconv.Itoa(i))); err != nil || ok {
				return false
			}
		}
		return true
	}, Timeout, time.Millisecond)
	total := 0
	for {
		n, err := s.PurgeOutcomes(ctx, 2)
		require.NoError(t, err)
		require.LessOrEqual(t, n, 2, "at most limit")
		total += n
		if n == 0 {
			break
		}
	}
	require.GreaterOrEqual(t, total, 5, "every expired outcome purged")
	_, ok, err := s.Outcome(ctx, keep)
	require.NoError(t, err)
	require.True(t, ok, "an outcome in retention is kept")
}

func testInvalid(t *testing.T, ctx context.Context, s claimstore.Store, ns string) {
	good := key(ns, "v")
	bad := []lockstore.Key{{Namespace: ns}, {ID: "v"}, {Namespace: ns, ID: "\xff"}, {Namespace: ns, ID: string(make([]byte, lockstore.MaxIDLen+1))}}
	for _, k := range bad {
		_, _, err := s.Reserve(ctx, k, "o", time.Hour)
		require.ErrorIs(t, err, claimstore.ErrInvalid, "%q", k)
		require.ErrorIs(t, err, lockstore.ErrInvalidKey, "%q", k)
		require.ErrorIs(t, s.Confirm(ctx, k, "o"), claimstore.ErrInvalid)
		require.ErrorIs(t, s.Cancel(ctx, k, "o"), claimstore.ErrInvalid)
		require.ErrorIs(t, s.Drop(ctx, k), claimstore.ErrInvalid)
		_, _, err = s.Outcome(ctx, k)
		require.ErrorIs(t, err, claimstore.ErrInvalid)
		require.ErrorIs(t, s.SaveOutcome(ctx, k, claimstore.Outcome{}, time.Hour), claimstore.ErrInvalid)
	}
	_, _, err := s.Reserve(ctx, good, "", time.Hour)
	require.ErrorIs(t, err, claimstore.ErrInvalid, "empty owner")
	_, _, err = s.Reserve(ctx, good, "o", -time.Second)
	require.ErrorIs(t, err, claimstore.ErrInvalid, "negative maxLag")
	require.ErrorIs(t, s.Confirm(ctx, good, ""), claimstore.ErrInvalid)
	require.ErrorIs(t, s.Cancel(ctx, good, ""), claimstore.ErrInvalid)
	_, err = s.List(ctx, "", "", 10)
	require.ErrorIs(t, err, claimstore.ErrInvalid, "empty namespace")
	_, err = s.List(ctx, ns, "", 0)
	require.ErrorIs(t, err, claimstore.ErrInvalid, "limit 0")
	require.ErrorIs(t, s.SaveOutcome(ctx, good, claimstore.Outcome{}, 0), claimstore.ErrInvalid, "retention 0")
	_, err = s.PurgeOutcomes(ctx, 0)
	require.ErrorIs(t, err, claimstore.ErrInvalid)
	require.Empty(t, list(t, ctx, s, ns), "nothing written by a refused call")
}

func testDoneContext(t *testing.T, ctx context.Context, s claimstore.Store, ns string) {
	done, cancel := context.WithCancel(ctx)
	cancel()
	k := key(ns, "v")
	_, _, err := s.Reserve(done, k, "o", time.Hour)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, s.Confirm(done, k, "o"), context.Canceled)
	require.ErrorIs(t, s.Cancel(done, k, "o"), context.Canceled)
	require.ErrorIs(t, s.Drop(done, k), context.Canceled)
	_, err = s.List(done, ns, "", 1)
	require.ErrorIs(t, err, context.Canceled)
	_, _, err = s.Outcome(done, k)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, s.SaveOutcome(done, k, claimstore.Outcome{}, time.Hour), context.Canceled)
	_, err = s.PurgeOutcomes(done, 1)
	require.ErrorIs(t, err, context.Canceled)
	require.Empty(t, list(t, ctx, s, ns))
}
