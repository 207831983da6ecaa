package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/postgres"
)

// A node opens its store on its pool (withStore), and takes a key that
// every node sharing the database respects.
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
			fmt.Println("holding", l.Key(), "with a token:", l.Token() > 0)
		}
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output: holding lobby/42 with a token: true
}

// withStore opens a pool on a fresh database of the test server and a
// store on it, runs fn with them and closes both, returning fn's error: fn
// returns its errors instead of exiting, so that its deferred calls, the
// store and the pool close on every path. The other examples use it too.
// An application reads its DSN from its configuration instead (for
// example DATABASE_URL=postgres://app@db.internal/app?application_name=node-1);
// the examples' tables (exampleSchema) are its own.
func withStore(ctx context.Context, fn func(*postgres.Store, *pgxpool.Pool) error) (err error) {
	dsn, drop, err := pgtest.ExampleDatabase(ctx, "example")
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, drop()) }()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, exampleSchema); err != nil {
		return err
	}
	store, err := postgres.New(ctx, pool, postgres.Config{
		Namespaces: map[string]int32{"lobby": 1},
	})
	if err != nil {
		return err
	}
	defer store.Close()
	return fn(store, pool)
}

// exampleSchema is the application's tables the examples write to.
const exampleSchema = `
	CREATE TABLE game_state (lobby text PRIMARY KEY, guessed text[] NOT NULL);
	INSERT INTO game_state VALUES ('lobby-42', '{pear}');
	CREATE TABLE tournament (id int PRIMARY KEY, state text NOT NULL, ends_at timestamptz NOT NULL, token bigint NOT NULL);
	INSERT INTO tournament VALUES (1, 'open', now() - interval '1 hour', 0), (2, 'open', now() + interval '1 hour', 0);
	CREATE TABLE lobby (id text PRIMARY KEY, players int NOT NULL);
	INSERT INTO lobby VALUES ('lobby-42', 3);
	CREATE TABLE ledger (entry text NOT NULL, token bigint NOT NULL);`
