// Package migrate applies a component's embedded SQL migrations with goose
// (github.com/pressly/goose/v3) and reads the version they reached. Each
// component (lockstore/postgres, claimstore/postgres, the SQLite stores)
// keeps its migrations as goose files in an embed.FS, which it exports, and
// records their versions in a goose version table of its own.
//
// On PostgreSQL the migration files name no schema: they run on a
// connection whose search_path is the component's schema (set at connect),
// so one file set serves every Config.Schema, and goose's version table
// lands in that schema too. Runs are serialised by a session advisory lock,
// taken blocking (no polling), so nodes starting together take turns.
package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

// Latest returns the highest version among fsys's migrations (goose file
// names: a number, an underscore, a name, .sql), or 0 when it has none.
func Latest(fsys fs.FS) (int64, error) {
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return 0, err
	}
	var latest int64
	for _, name := range names {
		v, err := goose.NumericComponent(name)
		if err != nil {
			return 0, fmt.Errorf("migration %s: %w", name, err)
		}
		latest = max(latest, v)
	}
	return latest, nil
}

// MustLatest is Latest for a package's embedded migrations, which a test
// checks: it panics on an error.
func MustLatest(fsys fs.FS) int64 {
	v, err := Latest(fsys)
	if err != nil {
		panic(err)
	}
	return v
}

// Sub returns the directory dir of fsys (the embedded migrations' folder),
// panicking on an error, which only a wrong literal can cause.
func Sub(fsys fs.FS, dir string) fs.FS {
	sub, err := fs.Sub(fsys, dir)
	if err != nil {
		panic(err)
	}
	return sub
}

// Querier is what PostgresVersion reads with: a pool, a connection or a
// transaction.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// PostgresVersion returns the highest applied version recorded in
// schema.table, or 0 when the schema or the table does not exist. It is one
// round trip.
func PostgresVersion(ctx context.Context, q Querier, schema, table string) (int64, error) {
	var v int64
	err := q.QueryRow(ctx, "SELECT coalesce(max(version_id), 0) FROM "+
		pgx.Identifier{schema, table}.Sanitize()+" WHERE is_applied").Scan(&v)
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok &&
		(pgErr.Code == "42P01" || pgErr.Code == "3F000") { // undefined_table, invalid_schema_name
		return 0, nil
	}
	return v, err
}

// Postgres applies fsys's pending migrations to schema on a connection
// opened with cc (its search_path set to schema, synchronous_commit on, so
// that a crash cannot lose a migration once it is recorded, and " migrate"
// after its application_name), recording
// them in table, which it creates in schema (and schema too) when missing.
// Every step that writes holds the advisory lock lockKey: the creation of
// the schema and the table a transaction-level one (see pgPrepare), the
// migrations a session-level one, from before goose reads the applied
// versions until after the last migration.
func Postgres(ctx context.Context, cc *pgx.ConnConfig, schema, table string, fsys fs.FS) error {
	// SET after connecting, not startup parameters: PgBouncer refuses
	// those it does not track.
	set := "SET search_path = " + pgx.Identifier{schema}.Sanitize() + "; SET synchronous_commit = on"
	cc = cc.Copy()
	// Its own application_name, so that pg_stat_activity tells it from
	// the node's connections (it may linger there a moment after Close).
	cc.RuntimeParams["application_name"] = strings.TrimSpace(cc.RuntimeParams["application_name"] + " migrate")
	db := stdlib.OpenDB(*cc, stdlib.OptionAfterConnect(func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, set)
		return err
	}))
	defer func() { _ = db.Close() }()
	if err := pgPrepare(ctx, db, schema, table, lockKey); err != nil {
		return err
	}
	return up(ctx, goose.DialectPostgres, db, table, fsys, pgLocker{key: lockKey})
}

// SQLite applies fsys's pending migrations to db, recording them in table.
// SQLite has no advisory lock: runs in one process take turns (a mutex);
// runs of two processes may overlap, each migration a transaction of its
// own, so SQLite migrations must be idempotent (IF NOT EXISTS), and
// overlapping runs may record a version twice, which is harmless.
func SQLite(ctx context.Context, db *sql.DB, table string, fsys fs.FS) error {
	// Runs in one process take turns: goose would otherwise race to create
	// its version table (and retry after a second).
	sqliteMu.Lock()
	defer sqliteMu.Unlock()
	return up(ctx, goose.DialectSQLite3, db, table, fsys, nil)
}

// sqliteMu serialises the SQLite runs of the process.
var sqliteMu sync.Mutex

func up(ctx context.Context, dialect goose.Dialect, db *sql.DB, table string, fsys fs.FS, locker lock.SessionLocker) error {
	opts := []goose.ProviderOption{
		goose.WithTableName(table),
		goose.WithDisableGlobalRegistry(true),
		goose.WithSlog(slog.New(slog.DiscardHandler)),
	}
	if locker != nil {
		opts = append(opts, goose.WithSessionLocker(locker))
	}
	p, err := goose.NewProvider(dialect, db, fsys, opts...)
	if err != nil {
		return err
	}
	_, err = p.Up(ctx)
	return err
}

// SQLiteVersion returns the highest applied version recorded in table of
// db's main database, or 0 when the table does not exist.
func SQLiteVersion(ctx context.Context, db *sql.DB, table string) (int64, error) {
	var exists bool
	err := db.QueryRowContext(ctx, "SELECT count(*) > 0 FROM sqlite_schema WHERE type = 'table' AND name = ?", table).Scan(&exists)
	if err != nil || !exists {
		return 0, err
	}
	var v int64
	err = db.QueryRowContext(ctx, `SELECT coalesce(max(version_id), 0) FROM "`+table+`" WHERE is_applied`).Scan(&v)
	return v, err
}
