package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/postgres"
)

// A nested Serialize runs in a savepoint: when its fn fails, its writes,
// its lock and its effects are dropped, even though the outer fn goes on
// and commits. Each fn's ctx carries the fencing token of its key.
func ExampleStore_Serialize_nested() {
	ctx := context.Background()
	err := withStore(ctx, func(store *postgres.Store, _ *pgxpool.Pool) error {
		insert := func(ctx context.Context, tx pgx.Tx, entry string) error {
			token, _ := lockstore.TokenFrom(ctx)
			_, err := tx.Exec(ctx, "INSERT INTO ledger (entry, token) VALUES ($1, $2)", entry, token)
			return err
		}
		err := store.Serialize(ctx, lockstore.Key{Namespace: "account", ID: "alice"},
			func(ctx context.Context, tx pgx.Tx) error {
				if err := insert(ctx, tx, "alice pays 10"); err != nil {
					return err
				}
				lockstore.AfterCommit(ctx, func() { fmt.Println("effect: alice paid") })

				err := store.Serialize(ctx, lockstore.Key{Namespace: "account", ID: "bob"},
					func(ctx context.Context, tx pgx.Tx) error {
						if err := insert(ctx, tx, "bob receives 10"); err != nil {
							return err
						}
						lockstore.AfterCommit(ctx, func() { fmt.Println("effect: bob was paid") })
						return errors.New("bob's account is closed")
					})
				// The insert for bob is rolled back and his effect dropped.
				fmt.Println("inner:", err)
				return nil // alice's payment goes on to a suspense account
			})
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// inner: bob's account is closed
	// effect: alice paid
}
