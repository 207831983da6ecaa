// Package postgres is the PostgreSQL backend of claimstore: a Store whose
// reservations and outcomes live in two tables of one database, so that
// every node sharing it sees the same ones.
//
//	pool, err := pgxpool.New(ctx, "postgres://app@db/app")
//	if err != nil {
//		return err
//	}
//	store, err := postgres.New(ctx, pool, postgres.Config{})
//	if err != nil {
//		return err
//	}
//	held, reserved, err := store.Reserve(ctx, key, commandID, time.Minute)
//
// docs/claimstore.md#claimstorepostgres describes the tables, migrations,
// clock, statements and batches.
package postgres
