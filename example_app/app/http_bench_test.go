package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/example_app/app"
	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/uniqueness"
)

// staffBenchSenders is how many clients send POST /staff at once.
const staffBenchSenders = 64

// BenchmarkPostStaff is POST /staff end to end over HTTP, 64 clients each
// signing up a new member, with 1 and 3 nodes on one PostgreSQL database,
// in one run on one server: impl=claimbus, the example's nodes (in-process
// bus, claims on lockstore/postgres), requests spread round robin over the
// nodes; impl=floor, as many minimal net/http servers, each on a pgxpool of
// the nodes' size, decoding the same body and running the same insert into
// the same table. Both use one client with keep-alive connections for
// every sender. `benchstat -col /impl` prints the ratio; ops/s is the
// throughput.
func BenchmarkPostStaff(b *testing.B) {
	for _, nodes := range []int{1, 3} {
		b.Run(fmt.Sprintf("nodes=%d/impl=floor", nodes), func(b *testing.B) {
			dsn := pgtest.DSN(b)
			urls := make([]string, nodes)
			for i := range urls {
				urls[i] = floorServer(b, dsn, fmt.Sprintf("floor-%d", i), i == 0)
			}
			seedStaff(b, dsn)
			staffStorm(b, urls)
		})
		b.Run(fmt.Sprintf("nodes=%d/impl=claimbus", nodes), func(b *testing.B) {
			dsn := pgtest.DSN(b)
			urls := make([]string, nodes)
			for i := range urls {
				_, urls[i] = pgNode(b, dsn, fmt.Sprintf("node-%d", i), "inprocess", app.Config{})
			}
			seedStaff(b, dsn)
			staffStorm(b, urls)
		})
	}
}

// seedRows is how many members the staff table holds before
// BenchmarkPostStaff starts.
const seedRows = 100_000

// seedStaff fills the staff table with seedRows members and analyzes it,
// as a table in service is (autovacuum): on a new, never-analyzed table
// the planner's generic plan for the claims' email = ANY($1) probe is a
// sequential scan, which grows with the table the benchmark fills and
// measures the missing statistics rather than the claims.
func seedStaff(b *testing.B, dsn string) {
	b.Helper()
	pool := pgtest.Connect(b, dsn, pgtest.PoolConfig{MaxConns: 1, ApplicationName: "seed"})
	ctx := context.Background()
	_, err := pool.Exec(ctx, `INSERT INTO staff (staff_id, email, name)
		SELECT 'seed-' || i, 'seed-' || i || '@example.org', 'Seed' FROM generate_series(1, $1) i`, seedRows)
	require.NoError(b, err)
	_, err = pool.Exec(ctx, "ANALYZE staff")
	require.NoError(b, err)
}

// staffStorm sends b.N sign-ups of distinct members from staffBenchSenders
// clients, round robin over urls, requires 201 Created of each and reports
// ops/s.
func staffStorm(b *testing.B, urls []string) {
	b.Helper()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: staffBenchSenders}}
	b.Cleanup(client.CloseIdleConnections)
	var seq, left atomic.Int64
	left.Store(int64(b.N))
	var wg sync.WaitGroup
	b.ResetTimer()
	for range staffBenchSenders {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				n := seq.Add(1)
				id := "s-" + strconv.FormatInt(n, 10)
				body := `{"staff_id":"` + id + `","email":"` + id + `@example.org","name":"Bench"}`
				if err := postCreated(client, urls[n%int64(len(urls))]+"/staff", body); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

// postCreated sends body to target and fails unless the answer is 201 Created.
func postCreated(client *http.Client, target, body string) error {
	resp, err := client.Post(target, "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("POST %s: %d %s", target, resp.StatusCode, raw)
	}
	return nil
}

// floorServer starts the floor of BenchmarkPostStaff on the database dsn
// names: POST /staff decodes the member, normalises it as the example does,
// inserts it into the staff table
// (the example's schema: a primary key and a unique index on email; the
// first server creates them) and answers 201 with it, or 409 when the
// insert hits a unique index. Everything closes when the benchmark ends.
func floorServer(b *testing.B, dsn, name string, create bool) string {
	b.Helper()
	pool := pgtest.Connect(b, dsn, pgtest.PoolConfig{MaxConns: 20, ApplicationName: name})
	if create {
		ctx := context.Background()
		for _, ddl := range []string{
			`CREATE TABLE IF NOT EXISTS staff (staff_id TEXT PRIMARY KEY, email TEXT NOT NULL, name TEXT NOT NULL)`,
			`CREATE UNIQUE INDEX IF NOT EXISTS staff_email_key ON staff (email)`,
		} {
			_, err := pool.Exec(ctx, ddl)
			require.NoError(b, err)
		}
	}
	srv := httptest.NewServer(floorHandler(pool))
	b.Cleanup(srv.Close)
	return srv.URL
}

// floorHandler is the whole floor server: one route, one insert.
func floorHandler(pool *pgxpool.Pool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /staff", func(w http.ResponseWriter, r *http.Request) {
		var s app.Staff
		if err := json.NewDecoder(r.Body).Decode(&s); err != nil {
			http.Error(w, `{"error":"bad body"}`, http.StatusBadRequest)
			return
		}
		s.Email, s.Name = uniqueness.NormalizeEmail(s.Email), strings.TrimSpace(s.Name)
		_, err := pool.Exec(r.Context(), `INSERT INTO staff (staff_id, email, name) VALUES ($1, $2, $3)`, s.StaffID, s.Email, s.Name)
		var pgErr *pgconn.PgError
		switch {
		case errors.As(err, &pgErr) && pgErr.Code == "23505":
			http.Error(w, `{"error":"already_taken"}`, http.StatusConflict)
			return
		case err != nil:
			http.Error(w, `{"error":"internal"}`, http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(s)
	})
	return mux
}
