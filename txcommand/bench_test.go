package txcommand_test

import (
	"context"
	"crypto/sha256"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

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
//   - impl=byhand is what impl=full does written by hand without
//     claimbus, as fast as pgx allows: the same statements in the same
//     three round trips (BEGIN with the two locks and the reads, the
//     handler's write, the reservation and outcome writes with COMMIT), so
//     full / byhand is claimbus's own cost and byhand / plain the cost of
//     the guarantee's statements themselves;
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
	insert := func(ctx context.Context, tx execer, id, email string) error {
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
	byhandOnce := func(b *testing.B) {
		id, email := next()
		if err := byHand(ctx, plain.pool, id, email, insert); err != nil {
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
			b.Run("impl=byhand", func(b *testing.B) { loop(b, senders, byhandOnce) })
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

// byHand runs the statements of a full command by hand: BEGIN, the
// transaction's timeouts and the locks of the key and the email, the
// outcome's read and the email's lookup and reservation read in one round
// trip; the handler's write; the reservation and the outcome with COMMIT.
// Its rows are those of impl=full: the same namespaces, a SHA-256
// fingerprint, the same result.
func byHand(ctx context.Context, pool *pgxpool.Pool, id, email string, write func(context.Context, execer, string, string) error) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	var first pgx.Batch
	first.Queue("BEGIN")
	first.Queue(`SELECT set_config('statement_timeout', '10000', true), set_config('idle_in_transaction_session_timeout', '10000', true),
		set_config('lock_timeout', '15000', true), pg_advisory_xact_lock(hashtext($1)), pg_advisory_xact_lock(hashtext($2))`, id, email)
	first.Queue(`SELECT fingerprint, result, err FROM claimbus.claim_outcome WHERE namespace = $2 AND id = $1 AND expires > now()`, id, byHandNamespace)
	first.Queue(`SELECT EXISTS (SELECT 1 FROM staff_read WHERE email = $1), (SELECT owner FROM claimbus.claim_reservation WHERE namespace = 'staff.email' AND id = $1)`, email)
	first.Queue("SAVEPOINT s")
	if err := conn.SendBatch(ctx, &first).Close(); err != nil {
		return err
	}
	if err := write(ctx, conn, "staff-"+id, email); err != nil {
		_, _ = conn.Exec(ctx, "ROLLBACK")
		return err
	}
	var last pgx.Batch
	last.Queue(`INSERT INTO claimbus.claim_reservation (namespace, id, owner, confirmed, at) VALUES ('staff.email', $1, $2, true, now())`, email, id)
	fp := sha256.Sum256([]byte(email))
	last.Queue(`INSERT INTO claimbus.claim_outcome (namespace, id, fingerprint, result, err, expires) VALUES ($4, $1, $2, $3, NULL, now() + interval '1 hour')
		ON CONFLICT (namespace, id) DO UPDATE SET fingerprint = excluded.fingerprint, result = excluded.result, err = excluded.err, expires = excluded.expires`,
		id, fp[:], []byte(`"staff-`+id+`"`), byHandNamespace)
	last.Queue("COMMIT")
	return conn.SendBatch(ctx, &last).Close()
}

// byHandNamespace is the namespace of impl=full's outcomes.
const byHandNamespace = "idempotency.commands.CreateStaff"

// execer runs a statement: a pgx.Tx, or a connection in a transaction.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
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
