// Command floor serves the floor of example_app's POST /staff (package
// floor) on PostgreSQL, for example_app storm to measure:
//
//	go run ./example_app/internal/floor/cmd/floor -db "$DATABASE_URL" -addr 127.0.0.1:8090
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/claimbus/claimbus/example_app/internal/floor"
)

func main() {
	db := flag.String("db", os.Getenv("DATABASE_URL"), "PostgreSQL URL")
	addr := flag.String("addr", "127.0.0.1:8090", "host:port to listen on")
	conns := flag.Int("conns", 20, "connections in the pool (serve's main pool has 20)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, *db, *addr, int32(*conns)) //nolint:gosec // a flag of a test tool
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, db, addr string, conns int32) error {
	cfg, err := pgxpool.ParseConfig(db)
	if err != nil {
		return err
	}
	cfg.MaxConns = conns
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := floor.Create(ctx, pool); err != nil {
		return err
	}
	srv := &http.Server{Addr: addr, Handler: floor.Handler(pool), ReadHeaderTimeout: 5 * time.Second}
	go func() { <-ctx.Done(); _ = srv.Shutdown(context.Background()) }()
	fmt.Fprintln(os.Stdout, "floor: listening on http://"+addr)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
