package postgres_test

import (
	"context"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/postgres"
)

// The examples run on a fresh database of the test server (pgtest, started
// by the package's TestMain): see withStore in example_locker_test.go.

// Serialize a read-modify-write per lobby across every node, and publish
// the result only once it is committed.
func ExampleStore_Serialize() {
	ctx := context.Background()
	err := withStore(ctx, func(store *postgres.Store, _ *pgxpool.Pool) error {
		lobby := "lobby-42"
		var words []string
		err := store.Serialize(ctx, lockstore.Key{Namespace: "lobby", ID: lobby},
			func(ctx context.Context, tx pgx.Tx) error {
				if err := tx.QueryRow(ctx, "SELECT guessed FROM game_state WHERE lobby = $1", lobby).Scan(&words); err != nil {
					return err
				}
				words = append(words, "apple")
				if _, err := tx.Exec(ctx, "UPDATE game_state SET guessed = $2 WHERE lobby = $1", lobby, words); err != nil {
					return err
				}
				// Runs after the commit and the release of the lock; never
				// if the transaction rolls back.
				lockstore.AfterCommit(ctx, func() { fmt.Println("broadcast", lobby, words) })
				return nil
			})
		if err != nil {
			return err
		}
		fmt.Println(words)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// broadcast lobby-42 [pear apple]
	// [pear apple]
}

// Run a periodic job once cluster-wide, stopping if the lock is lost, and
// fencing its writes with the lock's token, so that a run that lost the
// lock without noticing cannot overwrite a later one's.
func ExampleStore_Exclusive() {
	ctx := context.Background()
	err := withStore(ctx, func(store *postgres.Store, _ *pgxpool.Pool) error {
		var closed int64
		err := store.Exclusive(ctx, lockstore.Key{Namespace: "tournament.tick", ID: "all"},
			func(ctx context.Context, conn *pgx.Conn) error {
				// Each statement commits by itself; ctx is cancelled if this
				// connection, and so the lock, is lost.
				token, _ := lockstore.TokenFrom(ctx)
				tag, err := conn.Exec(ctx, "UPDATE tournament SET state = 'closed', token = $1 "+
					"WHERE state = 'open' AND ends_at < now() AND token <= $1", token)
				closed = tag.RowsAffected()
				return err
			})
		if err != nil {
			return err
		}
		fmt.Println("closed", closed)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output: closed 1
}

// Take locks inside a transaction the caller opened and commits.
func ExampleStore_WithTx() {
	ctx := context.Background()
	err := withStore(ctx, func(store *postgres.Store, pool *pgxpool.Pool) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(ctx) }()
		tctx, afterCommit := store.WithTx(ctx, tx)
		err = store.Serialize(tctx, lockstore.Key{Namespace: "lobby", ID: "lobby-42"},
			func(ctx context.Context, tx pgx.Tx) error {
				lockstore.AfterCommit(ctx, func() { fmt.Println("committed") })
				_, err := tx.Exec(ctx, "UPDATE lobby SET players = players + 1 WHERE id = 'lobby-42'")
				return err
			})
		if err != nil {
			return err
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
		afterCommit() // the effects of the caller's transaction are the caller's to run
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output: committed
}
