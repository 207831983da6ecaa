package lockstoretest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/lockstore"
)

// TxStore is one fresh store for a subtest of RunTx, with the suite's
// hands on its database: marker rows written in a transaction (Write) or
// through Exclusive's querier (WriteQ) and read back, a transaction of the
// caller's own (Begin, Commit, Rollback) for WithTx, and a way to end a
// held lock from the store's side (EndLock). Every field is required.
//
// Tx must be comparable (an interface such as pgx.Tx, or a pointer such as
// *sql.Tx): the suite checks that a nested fn gets the very transaction
// WithTx attached.
type TxStore[Tx comparable, Q any] struct {
	// Locker is the store under test.
	Locker lockstore.TxLocker[Tx, Q]
	// Peer is another store on the same database, as another node would
	// open it, which MutualExclusion runs beside Locker; for a backend
	// with one store per database (SQLite), Locker itself.
	Peer lockstore.TxLocker[Tx, Q]
	// Close closes the store; the suite calls it in one subtest and when
	// each ends, so it must be idempotent.
	Close func() error
	// Write inserts the marker row name in tx. Names are unique per run.
	Write func(ctx context.Context, tx Tx, name string) error
	// WriteQ inserts the marker row name through q, as Exclusive's fn gets
	// it: outside a transaction the row commits at once.
	WriteQ func(ctx context.Context, q Q, name string) error
	// Seen reports whether row name is visible inside tx.
	Seen func(ctx context.Context, tx Tx, name string) (bool, error)
	// Committed reports whether row name is committed: read on a
	// connection of its own, outside every transaction.
	Committed func(ctx context.Context, name string) (bool, error)
	// Begin opens a transaction of the caller's own on the store's
	// database; Commit and Rollback end it.
	Begin    func(ctx context.Context) (Tx, error)
	Commit   func(ctx context.Context, tx Tx) error
	Rollback func(ctx context.Context, tx Tx) error
	// EndLock ends, from the store's side, the lock that the running
	// Serialize whose transaction is tx holds, before its fn returns, as a
	// lost lock would end (for SQLite: Reset; for PostgreSQL: terminating
	// tx's session). It returns once the lock is gone.
	EndLock func(ctx context.Context, tx Tx) error
}

// NewTxStoreFunc returns a fresh TxStore for one subtest.
type NewTxStoreFunc[Tx comparable, Q any] func(t *testing.T) TxStore[Tx, Q]

// RunTx runs the conformance suite of lockstore.TxLocker on stores made by
// newStore: commit and rollback (on error, panic, a done ctx, a lock the
// store ended before the commit), AfterCommit effects (after the commit
// and the release, in registration order, never on rollback), nesting
// (tokens per key, savepoint rollback of writes and effects), WithTx,
// Exclusive, bad input, a closed store, rising tokens and mutual exclusion
// under many goroutines. Each subtest calls t.Parallel and takes its own
// store.
func RunTx[Tx comparable, Q any](t *testing.T, newStore NewTxStoreFunc[Tx, Q]) {
	t.Helper()
	tests := []struct {
		name string
		run  func(*txBundle[Tx, Q])
	}{
		{"CommitsWithAToken", testTxCommits[Tx, Q]},
		{"ErrorRollsBack", testTxErrorRollsBack[Tx, Q]},
		{"PanicRollsBack", testTxPanicRollsBack[Tx, Q]},
		{"DoneContextRollsBack", testTxDoneContextRollsBack[Tx, Q]},
		{"LostLockRollsBack", testTxLostLockRollsBack[Tx, Q]},
		{"EffectsAfterCommitInOrder", testTxEffectsAfterCommit[Tx, Q]},
		{"NoEffectsOnRollback", testTxNoEffectsOnRollback[Tx, Q]},
		{"NestedTokens", testTxNestedTokens[Tx, Q]},
		{"NestedErrorRollsBackToSavepoint", testTxNestedError[Tx, Q]},
		{"NestedPanicRollsBackToSavepoint", testTxNestedPanic[Tx, Q]},
		{"WithTx", testTxWithTx[Tx, Q]},
		{"WithTxNestedError", testTxWithTxNestedError[Tx, Q]},
		{"Exclusive", testTxExclusive[Tx, Q]},
		{"BadInput", testTxBadInput[Tx, Q]},
		{"ClosedStore", testTxClosedStore[Tx, Q]},
		{"TokensRise", testTxTokensRise[Tx, Q]},
		{"MutualExclusion", testTxMutualExclusion[Tx, Q]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.run(setupTx(t, newStore(t)))
		})
	}
}

// txBundle is the state of one subtest of RunTx.
type txBundle[Tx comparable, Q any] struct {
	t   *testing.T
	s   TxStore[Tx, Q]
	l   lockstore.TxLocker[Tx, Q]
	ctx context.Context
	wg  sync.WaitGroup
}

func setupTx[Tx comparable, Q any](t *testing.T, s TxStore[Tx, Q]) *txBundle[Tx, Q] {
	t.Helper()
	require.NotNil(t, s.Locker, "TxStore.Locker is nil")
	require.NotNil(t, s.Peer, "TxStore.Peer is nil")
	for name, f := range map[string]bool{
		"Close": s.Close == nil, "Write": s.Write == nil, "WriteQ": s.WriteQ == nil, "Seen": s.Seen == nil,
		"Committed": s.Committed == nil, "Begin": s.Begin == nil, "Commit": s.Commit == nil,
		"Rollback": s.Rollback == nil, "EndLock": s.EndLock == nil,
	} {
		require.False(t, f, "TxStore.%s is nil", name)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 4*Timeout)
	b := &txBundle[Tx, Q]{t: t, s: s, l: s.Locker, ctx: ctx}
	t.Cleanup(func() {
		_ = s.Close()
		cancel()
		b.wg.Wait()
	})
	return b
}

// key returns a key no other test uses.
func (b *txBundle[Tx, Q]) key() lockstore.Key {
	name := b.t.Name()
	if len(name) > 200 {
		name = name[len(name)-200:]
	}
	return lockstore.Key{Namespace: "lockstoretest", ID: fmt.Sprintf("%s/%s/%d", runID, name, keySeq.Add(1))}
}

// row returns a marker row name no other test uses.
func (b *txBundle[Tx, Q]) row(what string) string {
	return fmt.Sprintf("%s/%d/%s", runID, keySeq.Add(1), what)
}

func (b *txBundle[Tx, Q]) write(ctx context.Context, tx Tx, name string) {
	b.t.Helper()
	require.NoError(b.t, b.s.Write(ctx, tx, name), "write %s", name)
}

func (b *txBundle[Tx, Q]) committed(name string) bool {
	b.t.Helper()
	ok, err := b.s.Committed(b.ctx, name)
	require.NoError(b.t, err, "read %s", name)
	return ok
}

func (b *txBundle[Tx, Q]) seen(ctx context.Context, tx Tx, name string) bool {
	b.t.Helper()
	ok, err := b.s.Seen(ctx, tx, name)
	require.NoError(b.t, err, "read %s in the transaction", name)
	return ok
}

// token returns the fencing token ctx carries, which must be positive.
func (b *txBundle[Tx, Q]) token(ctx context.Context) int64 {
	b.t.Helper()
	return RequireToken(b.t, ctx)
}

// RequireToken returns the fencing token ctx carries (lockstore.TokenFrom),
// failing t when it carries none or one that is not positive: for the fn
// of a Serialize or Exclusive, whose ctx always carries its lock's token.
func RequireToken(t testing.TB, ctx context.Context) int64 {
	t.Helper()
	tok, ok := lockstore.TokenFrom(ctx)
	require.True(t, ok, "fn's ctx carries no fencing token")
	require.Positive(t, tok, "fn's token")
	return tok
}

// requireFree checks that key can be taken again at once: a Serialize on
// it within Timeout runs.
func (b *txBundle[Tx, Q]) requireFree(key lockstore.Key) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, Timeout)
	defer cancel()
	ran := false
	require.NoError(b.t, b.l.Serialize(ctx, key, func(context.Context, Tx) error {
		ran = true
		return nil
	}), "key %q is not free", key)
	require.True(b.t, ran)
}

func testTxCommits[Tx comparable, Q any](b *txBundle[Tx, Q]) {
	key, row := b.key(), b.row("committed")
	err := b.l.Serialize(b.ctx, key, func(ctx context.Context, tx Tx) error {
		b.token(ctx)
		b.write(ctx, tx, row)
		require.True(b.t, b.seen(ctx, tx, row), "fn does not see its own write")
		return nil
	})
	require.NoError(b.t, err)
	require.True(b.t, b.committed(row), "Serialize returned nil without committing")
	b.requireFree(key)
}

func testTxErrorRollsBack[Tx comparable, Q any](b *txBundle[Tx, Q]) {
	key, row := b.key(), b.row("failed")
	boom := errors.New("boom")
	err := b.l.Serialize(b.ctx, key, func(ctx context.Context, tx Tx) error {
		b.write(ctx, tx, row)
		return boom
	})
	require.Same(b.t, boom, err, "fn's error comes back as is")
	require.False(b.t, b.committed(row), "a failed fn's write was committed")
	b.requireFree(key)
}

func testTxPanicRollsBack[Tx comparable, Q any](b *txBundle[Tx, Q]) {
	key, row := b.key(), b.row("panicked")
	var ran atomic.Bool
	require.PanicsWithValue(b.t, "kaput", func() {
		_ = b.l.Serialize(b.ctx, key, func(ctx context.Context, tx Tx) error {
			b.write(ctx, tx, row)
			lockstore.AfterCommit(ctx, func() { ran.Store(true) })
			panic("kaput")
		})
	}, "the panic goes on after the rollback")
	require.False(b.t, ran.Load(), "an effect ran after a panic")
	require.False(b.t, b.committed(row), "a panicking fn's write was committed")
	b.requireFree(key)
}

func testTxDoneContextRollsBack[Tx comparable, Q any](b *txBundle[Tx, Q]) {
	key, row := b.key(), b.row("done")
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	err := b.l.Serialize(ctx, key, func(ctx context.Context, tx Tx) error {
		b.write(ctx, tx, row)
		cancel()
		return nil
	})
	require.ErrorIs(b.t, err, context.Canceled)
	require.False(b.t, b.committed(row), "committed after ctx was done")
	b.requireFree(key)
}

func testTxLostLockRollsBack[Tx comparable, Q any](b *txBundle[Tx, Q]) {
	key, row := b.key(), b.row("lost")
	var ran atomic.Bool
	err := b.l.Serialize(b.ctx, key, func(ctx context.Context, tx Tx) error {
		b.write(ctx, tx, row)
		lockstore.AfterCommit(ctx, func() { ran.Store(true) })
		require.NoError(b.t, b.s.EndLock(ctx, tx))
		return nil
	})
	require.ErrorIs(b.t, err, lockstore.ErrLockLost)
	require.False(b.t, b.committed(row), "committed without the lock")
	require.False(b.t, ran.Load(), "an effect ran after the lock was lost")
}

func testTxEffectsAfterCommit[Tx comparable, Q any](b *txBundle[Tx, Q]) {
	key, other, row := b.key(), b.key(), b.row("effects")
	var (
		mu    sync.Mutex
		order []string
	)
	record := func(what string) {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, what)
	}
	err := b.l.Serialize(b.ctx, key, func(ctx context.Context, tx Tx) error {
		b.write(ctx, tx, row)
		lockstore.AfterCommit(ctx, func() {
			// Committed and released by now: another connection sees the
			// row, and the key is free.
			record(fmt.Sprint("first committed=", b.committed(row)))
			b.requireFree(key)
		})
		require.NoError(b.t, b.l.Serialize(ctx, other, func(ctx context.Context, tx Tx) error {
			lockstore.AfterCommit(ctx, func() { record("nested") })
			return nil
		}))
		lockstore.AfterCommit(ctx, func() {
			record("last")
			// Registered by an effect: it runs too, after the others.
			lockstore.AfterCommit(ctx, func() { record("from an effect") })
		})
		record("fn end")
		return nil
	})
	require.NoError(b.t, err)
	require.Equal(b.t, []string{"fn end", "first committed=true", "nested", "last", "from an effect"}, order)
}

func testTxNoEffectsOnRollback[Tx comparable, Q any](b *txBundle[Tx, Q]) {
	var ran atomic.Bool
	err := b.l.Serialize(b.ctx, b.key(), func(ctx context.Context, tx Tx) error {
		lockstore.AfterCommit(ctx, func() { ran.Store(true) })
		require.NoError(b.t, b.l.Serialize(ctx, b.key(), func(ctx context.Context, tx Tx) error {
			lockstore.AfterCommit(ctx, func() { ran.Store(true) })
			return nil
		}))
		return errors.New("no")
	})
	require.Error(b.t, err)
	require.False(b.t, ran.Load(), "an effect ran after a rollback")

	// Outside any transaction an effect runs at once: with no store at
	// all, and inside Exclusive (its writes commit one by one).
	lockstore.AfterCommit(b.ctx, func() { ran.Store(true) })
	require.True(b.t, ran.Load(), "an effect outside a transaction did not run at once")
	ran.Store(false)
	require.NoError(b.t, b.l.Exclusive(b.ctx, b.key(), func(ctx context.Context, q Q) error {
		lockstore.AfterCommit(ctx, func() { ran.Store(true) })
		require.True(b.t, ran.Load(), "an effect outside a transaction did not run at once")
		return nil
	}))
}

func testTxExclusive[Tx comparable, Q any](b *txBundle[Tx, Q]) {
	key, row := b.key(), b.row("exclusive")
	boom := errors.New("boom")
	err := b.l.Exclusive(b.ctx, key, func(ctx context.Context, q Q) error {
		b.token(ctx)
		require.NoError(b.t, b.s.WriteQ(ctx, q, row))
		require.True(b.t, b.committed(row), "outside a transaction, Exclusive's writes commit by themselves")
		return boom
	})
	require.ErrorIs(b.t, err, boom)
	require.True(b.t, b.committed(row))
	b.requireFree(key)
}

func testTxBadInput[Tx comparable, Q any](b *txBundle[Tx, Q]) {
	require.Error(b.t, b.l.Serialize(b.ctx, b.key(), nil), "Serialize with a nil fn")
	require.Error(b.t, b.l.Exclusive(b.ctx, b.key(), nil), "Exclusive with a nil fn")
	long := func(n int) string { return strings.Repeat("x", n) }
	for _, key := range []lockstore.Key{
		{Namespace: "", ID: "1"},
		{Namespace: "lockstoretest", ID: ""},
		{Namespace: long(lockstore.MaxNamespaceLen + 1), ID: "1"},
		{Namespace: "lockstoretest", ID: long(lockstore.MaxIDLen + 1)},
		{Namespace: "lockstoretest", ID: "\xff\xfe"},
	} {
		err := b.l.Serialize(b.ctx, key, func(context.Context, Tx) error {
			b.t.Error("fn ran for an invalid key")
			return nil
		})
		require.ErrorIs(b.t, err, lockstore.ErrInvalidKey, "Serialize %q", key)
		err = b.l.Exclusive(b.ctx, key, func(context.Context, Q) error {
			b.t.Error("fn ran for an invalid key")
			return nil
		})
		require.ErrorIs(b.t, err, lockstore.ErrInvalidKey, "Exclusive %q", key)
	}
}

func testTxClosedStore[Tx comparable, Q any](b *txBundle[Tx, Q]) {
	require.NoError(b.t, b.s.Close())
	err := b.l.Serialize(b.ctx, b.key(), func(context.Context, Tx) error {
		b.t.Error("fn ran on a closed store")
		return nil
	})
	require.ErrorIs(b.t, err, lockstore.ErrClosed)
	err = b.l.Exclusive(b.ctx, b.key(), func(context.Context, Q) error {
		b.t.Error("fn ran on a closed store")
		return nil
	})
	require.ErrorIs(b.t, err, lockstore.ErrClosed)
}

func testTxTokensRise[Tx comparable, Q any](b *txBundle[Tx, Q]) {
	key := b.key()
	var last int64
	for i := range 6 {
		var tok int64
		var err error
		if i%2 == 0 {
			err = b.l.Serialize(b.ctx, key, func(ctx context.Context, tx Tx) error {
				tok = b.token(ctx)
				return nil
			})
		} else {
			err = b.l.Exclusive(b.ctx, key, func(ctx context.Context, q Q) error {
				tok = b.token(ctx)
				return nil
			})
		}
		require.NoError(b.t, err)
		require.Greater(b.t, tok, last, "call %d's token is not greater than the previous one", i)
		last = tok
	}
}

// testTxMutualExclusion runs Serialize and Exclusive on two hot keys from
// many goroutines, on Locker and Peer: one fn at a time per key, each with
// a token greater than the key's previous one, and each Serialize sees the
// row the key's previous fn wrote (its commit came first).
func testTxMutualExclusion[Tx comparable, Q any](b *txBundle[Tx, Q]) {
	const goroutines, rounds, keys = 16, 8, 2
	type hot struct {
		key       lockstore.Key
		inside    atomic.Int32
		lastToken atomic.Int64
		lastRow   atomic.Pointer[string]
	}
	var (
		hots          [keys]hot
		overlaps      atomic.Int64
		stale, unseen atomic.Int64
		sections      atomic.Int64
	)
	for i := range hots {
		hots[i].key = b.key()
	}
	// critical is fn's body; seen reports whether the key's previous row
	// is visible (Exclusive, outside a transaction, does not ask).
	critical := func(ctx context.Context, h *hot, seen func(string) bool, write func(string) error) error {
		if h.inside.Add(1) != 1 {
			overlaps.Add(1)
		}
		defer h.inside.Add(-1)
		tok, _ := lockstore.TokenFrom(ctx)
		if prev := h.lastToken.Swap(tok); tok <= prev {
			stale.Add(1)
		}
		if prev := h.lastRow.Load(); prev != nil && seen != nil && !seen(*prev) {
			unseen.Add(1)
		}
		runtime.Gosched()
		row := b.row("hot")
		if err := write(row); err != nil {
			return err
		}
		h.lastRow.Store(&row)
		sections.Add(1)
		return nil
	}
	errs := make(chan error, goroutines*rounds)
	<-goTogether(&b.wg, goroutines, func(g int) {
		l := b.l
		if g%2 == 1 {
			l = b.s.Peer
		}
		for r := range rounds {
			h := &hots[(g+r)%keys]
			var err error
			if r%2 == 0 {
				err = l.Serialize(b.ctx, h.key, func(ctx context.Context, tx Tx) error {
					seen := func(row string) bool {
						ok, err := b.s.Seen(ctx, tx, row)
						return err == nil && ok
					}
					return critical(ctx, h, seen, func(row string) error { return b.s.Write(ctx, tx, row) })
				})
			} else {
				err = l.Exclusive(b.ctx, h.key, func(ctx context.Context, q Q) error {
					return critical(ctx, h, nil, func(row string) error { return b.s.WriteQ(ctx, q, row) })
				})
			}
			if err != nil {
				errs <- err
			}
		}
	})
	close(errs)
	for err := range errs {
		require.NoError(b.t, err)
	}
	require.Zero(b.t, overlaps.Load(), "fns that ran while another held the key")
	require.Zero(b.t, stale.Load(), "fns whose token was not greater than the key's previous one")
	require.Zero(b.t, unseen.Load(), "Serialize fns that did not see the row of the key's previous fn")
	require.EqualValues(b.t, goroutines*rounds, sections.Load())
	for i := range hots {
		require.True(b.t, b.committed(*hots[i].lastRow.Load()), "the last row of a hot key")
	}
}
