package txnest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/claimbus/claimbus/lockstore/internal/effects"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/internal/txnest"
)

// fakeSavepoint records what Run asked of it.
type fakeSavepoint struct {
	calls      []string
	next       int64 // the token a new key draws
	releaseErr error
}

func (f *fakeSavepoint) Open(_ context.Context, token int64, held bool) (int64, error) {
	f.calls = append(f.calls, "open")
	if !held {
		return f.next, nil
	}
	return token, nil
}

func (f *fakeSavepoint) Release() error {
	f.calls = append(f.calls, "release")
	return f.releaseErr
}

func (f *fakeSavepoint) Rollback() error {
	f.calls = append(f.calls, "rollback")
	return nil
}

func nested(h *txnest.Held[string], id string, sp txnest.Savepoint) txnest.Nested[string, string] {
	return txnest.Nested[string, string]{
		Op: "test: Serialize", Key: lockstore.Key{Namespace: "t", ID: id}, Tx: "tx", Held: h, ID: id,
		Enclosing: func() (int64, bool) { return 0, false }, Savepoint: sp,
	}
}

func TestRunReleasesAndKeepsTheToken(t *testing.T) {
	var h txnest.Held[string]
	h.Init("outer", 1)
	sp := &fakeSavepoint{next: 7}
	ctx, scope := effects.New(context.Background())
	ran := false
	v, err := txnest.Run(ctx, nested(&h, "k", sp), func(ctx context.Context, tx string) (string, error) {
		tok, _ := lockstore.TokenFrom(ctx)
		require.EqualValues(t, 7, tok)
		lockstore.AfterCommit(ctx, func() { ran = true })
		return tx, nil
	})
	require.NoError(t, err)
	require.Equal(t, "tx", v)
	require.Equal(t, []string{"open", "release"}, sp.calls)
	tok, ok := h.Token("k")
	require.True(t, ok)
	require.EqualValues(t, 7, tok)
	tok, ok = h.Token("outer")
	require.True(t, ok)
	require.EqualValues(t, 1, tok)
	require.False(t, ran, "a merged effect ran before the outermost commit")
	scope.Run()
	require.True(t, ran)
}

func TestRunRollsBackAndForgets(t *testing.T) {
	boom := errors.New("boom")
	for name, fn := range map[string]func(context.Context, string) (int, error){
		"error": func(context.Context, string) (int, error) { return 1, boom },
		"panic": func(context.Context, string) (int, error) { panic(boom) },
	} {
		t.Run(name, func(t *testing.T) {
			var h txnest.Held[string]
			sp := &fakeSavepoint{next: 3}
			ctx, scope := effects.New(context.Background())
			run := func() (int, error) {
				return txnest.Run(ctx, nested(&h, "k", sp), func(ctx context.Context, tx string) (int, error) {
					lockstore.AfterCommit(ctx, func() { t.Error("an effect of a rolled-back savepoint ran") })
					// A deeper call releases into this savepoint: it goes too.
					_, err := txnest.Run(ctx, nested(&h, "deep", &fakeSavepoint{next: 4}), func(context.Context, string) (int, error) { return 0, nil })
					require.NoError(t, err)
					return fn(ctx, tx)
				})
			}
			if name == "panic" {
				require.PanicsWithValue(t, boom, func() { _, _ = run() })
			} else {
				v, err := run()
				require.Same(t, boom, err)
				require.Zero(t, v)
			}
			require.Equal(t, []string{"open", "rollback"}, sp.calls)
			_, ok := h.Token("k")
			require.False(t, ok, "a rolled-back key is still held")
			_, ok = h.Token("deep")
			require.False(t, ok, "a key released into a rolled-back savepoint is still held")
			scope.Run()
		})
	}
}

func TestRunRollsBackAFailedRelease(t *testing.T) {
	var h txnest.Held[string]
	sp := &fakeSavepoint{next: 3, releaseErr: errors.New("aborted")}
	_, err := txnest.Run(context.Background(), nested(&h, "k", sp), func(context.Context, string) (int, error) { return 1, nil })
	require.ErrorContains(t, err, "release the savepoint")
	require.Equal(t, []string{"open", "release", "rollback"}, sp.calls)
}
