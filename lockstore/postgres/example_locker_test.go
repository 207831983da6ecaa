package postgres_test

import (
	"context"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/postgres"
)

// A node opens its store on its pool, and takes a key that every node
// sharing the database respects. (Not run: it needs a server.)
func ExampleNew() {
	if err := holdLobby(context.Background()); err != nil {
		log.Fatal(err)
	}
}

// holdLobby returns its errors instead of exiting, so that its deferred
// Release and Close run on every path.
func holdLobby(ctx context.Context) error {
	pool, err := pgxpool.New(ctx, "postgres://app@db.internal/app?application_name=node-1")
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
}
