package lockstoretest

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/lockstore"
)

// The nesting subtests of RunTx: a nested call runs on the outer
// transaction (with the token of a key it holds already, a new one for
// another key), a nested error or panic rolls back only its savepoint's
// writes and effects, and WithTx runs Serialize and Exclusive in the
// caller's own transaction.

func testTxNestedTokens[Tx comparable, Q any](b *txBundle[Tx, Q]) {
	k1, k2 := b.key(), b.key()
	err := b.l.Serialize(b.ctx, k1, func(ctx context.Context, outer Tx) error {
		t1 := b.token(ctx)
		var t2 int64
		require.NoError(b.t, b.l.Serialize(ctx, k1, func(ctx context.Context, tx Tx) error {
			require.True(b.t, any(tx) == any(outer), "a nested call runs on the outer transaction") //nolint:testifylint // identity: require.Equal would take a deeply equal other transaction
			require.Equal(b.t, t1, b.token(ctx), "the same key reuses its token")
			return nil
		}))
		require.NoError(b.t, b.l.Serialize(ctx, k2, func(ctx context.Context, tx Tx) error {
			require.True(b.t, any(tx) == any(outer), "a nested call runs on the outer transaction") //nolint:testifylint // identity: require.Equal would take a deeply equal other transaction
			t2 = b.token(ctx)
			require.Greater(b.t, t2, t1, "another key gets a new, greater token")
			// Deeper, the outer key is still the transaction's.
			return b.l.Serialize(ctx, k1, func(ctx context.Context, tx Tx) error {
				require.Equal(b.t, t1, b.token(ctx))
				return nil
			})
		}))
		require.NoError(b.t, b.l.Serialize(ctx, k2, func(ctx context.Context, tx Tx) error {
			require.Equal(b.t, t2, b.token(ctx), "a key the transaction took keeps its token")
			return nil
		}))
		require.Equal(b.t, t1, b.token(ctx), "the outer ctx keeps its own token")
		return nil
	})
	require.NoError(b.t, err)
}

func testTxNestedError[Tx comparable, Q any](b *txBundle[Tx, Q]) {
	k1, k2, k3 := b.key(), b.key(), b.key()
	outerRow, inner, deep, same, excl, later := b.row("outer"), b.row("inner"), b.row("deep"), b.row("same"), b.row("exclusive"), b.row("later")
	boom := errors.New("inner fails")
	var ran []string
	effect := func(what string) func() { return func() { ran = append(ran, what) } }
	err := b.l.Serialize(b.ctx, k1, func(ctx context.Context, tx Tx) error {
		b.write(ctx, tx, outerRow)
		lockstore.AfterCommit(ctx, effect("outer"))

		var t2 int64
		err := b.l.Serialize(ctx, k2, func(ctx context.Context, tx Tx) error {
			t2 = b.token(ctx)
			b.write(ctx, tx, inner)
			lockstore.AfterCommit(ctx, effect("inner"))
			// A deeper call succeeds, inside the one that fails: it goes
			// with it.
			require.NoError(b.t, b.l.Serialize(ctx, k3, func(ctx context.Context, tx Tx) error {
				lockstore.AfterCommit(ctx, effect("deep"))
				b.write(ctx, tx, deep)
				return nil
			}))
			return boom
		})
		require.Same(b.t, boom, err, "a nested fn's error comes back as is")

		// The same key as the outer call: its savepoint too.
		err = b.l.Serialize(ctx, k1, func(ctx context.Context, tx Tx) error {
			b.write(ctx, tx, same)
			lockstore.AfterCommit(ctx, effect("same key"))
			return boom
		})
		require.Same(b.t, boom, err)

		// Exclusive inside a transaction is Serialize: its savepoint too.
		err = b.l.Exclusive(ctx, k1, func(ctx context.Context, q Q) error {
			require.NoError(b.t, b.s.WriteQ(ctx, q, excl))
			lockstore.AfterCommit(ctx, effect("exclusive"))
			return boom
		})
		require.Same(b.t, boom, err)

		// The outer transaction is usable and sees none of it.
		require.True(b.t, b.seen(ctx, tx, outerRow))
		for _, r := range []string{inner, deep, same, excl} {
			require.False(b.t, b.seen(ctx, tx, r), "a rolled-back savepoint's write %s is seen", r)
		}
		// k2 went with the savepoint it was taken in: a later nested call
		// takes it again, with a new token.
		require.NoError(b.t, b.l.Serialize(ctx, k2, func(ctx context.Context, tx Tx) error {
			require.Greater(b.t, b.token(ctx), t2, "a key taken again after its savepoint rolled back gets a new token")
			lockstore.AfterCommit(ctx, effect("later"))
			b.write(ctx, tx, later)
			return nil
		}))
		require.Empty(b.t, ran, "an effect ran before the commit")
		return nil // the inner errors are swallowed
	})
	require.NoError(b.t, err)
	require.Equal(b.t, []string{"outer", "later"}, ran)
	require.True(b.t, b.committed(outerRow))
	require.True(b.t, b.committed(later))
	for _, r := range []string{inner, deep, same, excl} {
		require.False(b.t, b.committed(r), "a rolled-back savepoint's write %s committed", r)
	}

	// An outer failure rolls back what nested calls released into it.
	nested := b.row("released into a failed outer")
	outerErr := errors.New("outer fails")
	err = b.l.Serialize(b.ctx, k1, func(ctx context.Context, tx Tx) error {
		require.NoError(b.t, b.l.Serialize(ctx, k2, func(ctx context.Context, tx Tx) error {
			b.write(ctx, tx, nested)
			return nil
		}))
		return outerErr
	})
	require.Same(b.t, outerErr, err)
	require.False(b.t, b.committed(nested), "a nested write outlived the outer rollback")
	for _, k := range []lockstore.Key{k1, k2, k3} {
		b.requireFree(k)
	}
}

func testTxNestedPanic[Tx comparable, Q any](b *txBundle[Tx, Q]) {
	outerRow, inner := b.row("outer"), b.row("inner")
	err := b.l.Serialize(b.ctx, b.key(), func(ctx context.Context, tx Tx) error {
		func() {
			defer func() { require.Equal(b.t, "inner panics", recover()) }()
			_ = b.l.Serialize(ctx, b.key(), func(ctx context.Context, tx Tx) error {
				b.write(ctx, tx, inner)
				lockstore.AfterCommit(ctx, func() { b.t.Error("an effect of the panicking call ran") })
				panic("inner panics")
			})
		}()
		require.False(b.t, b.seen(ctx, tx, inner), "a panicking nested call's write is seen")
		b.write(ctx, tx, outerRow)
		return nil
	})
	require.NoError(b.t, err)
	require.True(b.t, b.committed(outerRow))
	require.False(b.t, b.committed(inner))
}

func testTxWithTx[Tx comparable, Q any](b *txBundle[Tx, Q]) {
	for _, commit := range []bool{true, false} {
		row, xrow := b.row(fmt.Sprint("serialize commit=", commit)), b.row(fmt.Sprint("exclusive commit=", commit))
		tx, err := b.s.Begin(b.ctx)
		require.NoError(b.t, err)
		tctx, afterCommit := b.l.WithTx(b.ctx, tx)
		require.NotNil(b.t, afterCommit)
		var ran atomic.Int32
		require.NoError(b.t, b.l.Serialize(tctx, b.key(), func(ctx context.Context, got Tx) error {
			require.True(b.t, any(got) == any(tx), "Serialize runs in the attached transaction") //nolint:testifylint // identity: require.Equal would take a deeply equal other transaction
			b.token(ctx)
			lockstore.AfterCommit(ctx, func() { ran.Add(1) })
			b.write(ctx, got, row)
			return nil
		}))
		// Inside a transaction, Exclusive is Serialize: q is the
		// transaction.
		require.NoError(b.t, b.l.Exclusive(tctx, b.key(), func(ctx context.Context, q Q) error {
			b.token(ctx)
			lockstore.AfterCommit(ctx, func() { ran.Add(1) })
			return b.s.WriteQ(ctx, q, xrow)
		}))
		require.Zero(b.t, ran.Load(), "an effect ran before the caller's commit")
		require.True(b.t, b.seen(b.ctx, tx, row))
		require.False(b.t, b.committed(row), "Serialize committed the caller's transaction")
		require.False(b.t, b.committed(xrow), "Exclusive committed the caller's transaction")
		if commit {
			require.NoError(b.t, b.s.Commit(b.ctx, tx))
			require.Zero(b.t, ran.Load(), "an effect ran before afterCommit")
			afterCommit()
			require.EqualValues(b.t, 2, ran.Load())
		} else {
			require.NoError(b.t, b.s.Rollback(b.ctx, tx))
		}
		require.Equal(b.t, commit, b.committed(row))
		require.Equal(b.t, commit, b.committed(xrow))
	}
}

func testTxWithTxNestedError[Tx comparable, Q any](b *txBundle[Tx, Q]) {
	outerRow, inner := b.row("outer"), b.row("inner")
	boom := errors.New("boom")
	tx, err := b.s.Begin(b.ctx)
	require.NoError(b.t, err)
	tctx, afterCommit := b.l.WithTx(b.ctx, tx)
	err = b.l.Serialize(tctx, b.key(), func(ctx context.Context, tx Tx) error {
		b.write(ctx, tx, inner)
		lockstore.AfterCommit(ctx, func() { b.t.Error("an effect of the failed call ran") })
		return boom
	})
	require.Same(b.t, boom, err)
	b.write(b.ctx, tx, outerRow)
	require.NoError(b.t, b.s.Commit(b.ctx, tx))
	afterCommit()
	require.True(b.t, b.committed(outerRow), "the caller's transaction stayed usable")
	require.False(b.t, b.committed(inner))
}
