package sqlite_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/sqlite"
)

// The benchmarks compare Serialize, uncontended, with the transaction it
// wraps written by hand: BEGIN IMMEDIATE (the DSN's _txlock) and COMMIT on
// the same *sql.DB, with the same body. The difference is the cost of the
// key's lock, the write gate and the context values.

// bodies are what the transaction does: nothing (pure overhead), or one
// read-modify-write.
var bodies = []struct {
	name string
	fn   func(ctx context.Context, tx *sql.Tx) (int, error)
}{
	{"empty", func(context.Context, *sql.Tx) (int, error) { return 0, nil }},
	{"update", func(ctx context.Context, tx *sql.Tx) (int, error) { return increment(ctx, tx, "c") }},
}

func BenchmarkSerialize(b *testing.B) {
	for _, body := range bodies {
		b.Run(body.name, func(b *testing.B) {
			s, _ := counterStore(b)
			ctx := context.Background()
			k := lockstore.Key{Namespace: "bench", ID: "c"}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := sqlite.SerializeValue(ctx, s, k, body.fn); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkBaselineBeginImmediate(b *testing.B) {
	for _, body := range bodies {
		b.Run(body.name, func(b *testing.B) {
			_, db := counterStore(b)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := body.fn(ctx, tx); err != nil {
					b.Fatal(err)
				}
				if err := tx.Commit(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
