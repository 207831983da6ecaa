package postgres_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/postgres"
)

// A node opens its store on its pool (withStore), and takes a key that
// every node sharing the database respects. (Not run: it needs a server.)
func ExampleNew() {
	ctx := context.Background()
	err := withStore(ctx, func(store *postgres.Store, _ *pgxpool.Pool) error {
		l, err := store.Lock(ctx, lockstore.Key{Namespace: "lobby", ID: "42"})
		if err != nil {
			return err
		}
		defer l.Release(context.Background())
		select {
		case <-l.Lost():
			log.Print("the lock connection died: stop writing")
		default:
			fmt.Println("holding lobby/42 with token", l.Token())
		}
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
}

// withStore opens a pool on DATABASE_URL (for example
// postgres://app@db.internal/app?application_name=node-1) and a store on
// it, runs fn with them and closes both, returning fn's error: fn returns
// its errors instead of exiting, so that its deferred calls, the store and
// the pool close on every path. The other examples use it too.
func withStore(ctx context.Context, fn func(*postgres.Store, *pgxpool.Pool) error) error {
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	defer pool.Close()
	store, err := postgres.New(ctx, pool, postgres.Config{
		Namespaces: map[string]int32{"lobby": 1},
	})
	if err != nil {
		return err
	}
	defer store.Close()
	return fn(store, pool)
}
