package txcommand_test

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/claimbus/claimbus/commands"
	"github.com/claimbus/claimbus/lockstore/postgres"
	"github.com/claimbus/claimbus/middleware"
	"github.com/claimbus/claimbus/txcommand"
	"github.com/claimbus/claimbus/uniqueness"
)

// The benchmarks run one CreateStaff per iteration, each with a new
// email, at 1 sender and at 64 (RunParallel), on pools of 8 connections:
//   - impl=plain is the floor: the same handler's write in its own
//     transaction, without claimbus (BEGIN, INSERT, COMMIT);
//   - impl=full is the middleware with a unique email that reserves and an
//     idempotency key, the handler's write in the command's transaction;
//   - impl=claim and impl=reserved are the email's claim alone, without
//     and with its reservation.
//
// Compare them in one run: BENCH_GROUPS=tx make bench-compare.
func BenchmarkCommand(b *testing.B) {
	dsn := newDB(b)
	plain := newNode(b, dsn, "plain", fullConfig())
	plainRule := txcommand.Unique(uniqueness.Names{Field: "email", Scope: "staff.email"},
		func(c *commands.CreateStaff) string { return c.Email }, "SELECT 1 FROM staff_read WHERE email = $1")
	configs := []struct {
		name string
		cfg  txcommand.Config
	}{
		{"full", fullConfig()},
		{"claim", txcommand.Config{Rules: []txcommand.Rule{plainRule}}},
		{"reserved", txcommand.Config{Rules: []txcommand.Rule{emailRule}}},
	}
	var n atomic.Int64
	next := func() (string, string) {
		i := strconv.FormatInt(n.Add(1), 10)
		return uuid.NewString(), "b" + i + "@x.org"
	}
	ctx := context.Background()
	insert := func(ctx context.Context, tx pgx.Tx, id, email string) error {
		_, err := tx.Exec(ctx, "INSERT INTO staff_events (id, email) VALUES ($1, $2)", id, email)
		return err
	}
	plainOnce := func(b *testing.B) {
		id, email := next()
		err := pgx.BeginFunc(ctx, plain.pool, func(tx pgx.Tx) error { return insert(ctx, tx, id, email) })
		if err != nil {
			b.Fatal(err)
		}
	}
	handler := func(ctx context.Context, p *middleware.Pipeline) (any, error) {
		tx, _ := postgres.TxFrom(ctx)
		c := p.Command.(*commands.CreateStaff)
		return c.StaffID, insert(ctx, tx, c.StaffID, c.Email)
	}
	for _, senders := range []int{1, 64} {
		b.Run("senders="+strconv.Itoa(senders), func(b *testing.B) {
			b.Run("impl=plain", func(b *testing.B) { loop(b, senders, plainOnce) })
			for _, c := range configs {
				e := newNode(b, dsn, c.name, c.cfg)
				b.Run("impl="+c.name, func(b *testing.B) {
					loop(b, senders, func(b *testing.B) {
						id, email := next()
						if _, err := e.send(ctx, id, email, handler); err != nil {
							b.Fatal(err)
						}
					})
				})
			}
		})
	}
}

// loop runs once b.N times from senders goroutines.
func loop(b *testing.B, senders int, once func(b *testing.B)) {
	b.ReportAllocs()
	if senders == 1 {
		for b.Loop() {
			once(b)
		}
		return
	}
	b.SetParallelism(max(senders/max(1, runtime.GOMAXPROCS(0)), 1))
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			once(b)
		}
	})
}
