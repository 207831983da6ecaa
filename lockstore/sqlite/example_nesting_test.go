package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/sqlite"
)

// A nested Serialize runs in a savepoint: when its fn fails, its writes
// and its effects are dropped, even though the outer fn goes on and
// commits. Each fn's ctx carries the fencing token of its key.
func ExampleStore_Serialize_nested() {
	dir, err := os.MkdirTemp("", "claimbus-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", sqlite.DSN(filepath.Join(dir, "app.db"), 0))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, "CREATE TABLE ledger (entry TEXT)"); err != nil {
		log.Fatal(err)
	}
	store, err := sqlite.New(ctx, db, sqlite.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	insert := func(ctx context.Context, tx *sql.Tx, entry string) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO ledger (entry) VALUES (?)", entry)
		return err
	}
	err = store.Serialize(ctx, lockstore.Key{Namespace: "account", ID: "alice"},
		func(ctx context.Context, tx *sql.Tx) error {
			token, _ := lockstore.TokenFrom(ctx)
			fmt.Println("alice's token:", token)
			if err := insert(ctx, tx, "alice pays 10"); err != nil {
				return err
			}
			lockstore.AfterCommit(ctx, func() { fmt.Println("effect: alice paid") })

			err := store.Serialize(ctx, lockstore.Key{Namespace: "account", ID: "bob"},
				func(ctx context.Context, tx *sql.Tx) error {
					token, _ := lockstore.TokenFrom(ctx)
					fmt.Println("bob's token:", token)
					if err := insert(ctx, tx, "bob receives 10"); err != nil {
						return err
					}
					lockstore.AfterCommit(ctx, func() { fmt.Println("effect: bob was paid") })
					return errors.New("bob's account is closed")
				})
			fmt.Println("inner:", err)
			return nil // alice's payment goes on to a suspense account
		})
	if err != nil {
		log.Fatal(err)
	}
	rows, err := db.QueryContext(ctx, "SELECT entry FROM ledger")
	if err != nil {
		log.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var entry string
		if err := rows.Scan(&entry); err != nil {
			log.Fatal(err)
		}
		fmt.Println("committed:", entry)
	}
	if err := rows.Err(); err != nil {
		log.Fatal(err)
	}
	// Output:
	// alice's token: 1
	// bob's token: 2
	// inner: bob's account is closed
	// effect: alice paid
	// committed: alice pays 10
}
