package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The probes of TryLockProbe, pipelined after a round trip's statement.

// probeRun is one probe query of a round trip: the values it asks about
// and, once run, those it found taken, or its error.
type probeRun struct {
	values []string
	taken  map[string]bool
	err    error
}

// probesOf groups the probes of batch's lock requests by their SQL, or
// returns nil when none has one.
func probesOf(batch []*request) map[string]*probeRun {
	var probes map[string]*probeRun
	for _, r := range batch {
		if r.probe == nil {
			continue
		}
		if probes == nil {
			probes = make(map[string]*probeRun, 1)
		}
		p := probes[r.probe.SQL]
		if p == nil {
			p = &probeRun{}
			probes[r.probe.SQL] = p
		}
		p.values = append(p.values, r.probe.Value)
	}
	return probes
}

// queryProbing is query of the batch statement with the probes pipelined
// after it, in the same round trip: each probe is a statement of its own,
// so its snapshot is taken after the batch statement took its locks. A
// probe that fails on the server (a *pgconn.PgError: a missing table, a
// type mismatch) fails its requests, not the connection; the server then
// skips the rest of the pipeline, so the probes after it in the round trip
// fail too, with its error (their claims are
// unavailable, and their senders try again). Any other error fails the
// round trip.
func (c *lockConn) queryProbing(ctx context.Context, n int, probes map[string]*probeRun, args ...any) ([]int64, error) {
	var b pgx.Batch
	b.Queue(c.s.batchSQL, args...)
	order := make([]*probeRun, 0, len(probes))
	for sql, p := range probes {
		if err := c.prepareProbe(ctx, sql); err != nil {
			if !isServerError(err) {
				return nil, err
			}
			p.err = fmt.Errorf("postgres: probe: %w", err)
			continue
		}
		b.Queue(sql, p.values)
		order = append(order, p)
	}
	if len(order) == 0 {
		return c.query(ctx, c.s.batchSQL, n, args...)
	}
	br := c.conn.SendBatch(ctx, &b)
	results, err := scanProbing(br, n, order)
	if cerr := br.Close(); err == nil && cerr != nil && !isServerError(cerr) {
		return nil, cerr
	}
	return results, err
}

// scanProbing reads the answers of queryProbing's batch: the batch
// statement's results, then each probe's, in order.
func scanProbing(br pgx.BatchResults, n int, order []*probeRun) ([]int64, error) {
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	results, err := scanResults(rows, n)
	if err != nil {
		return nil, err
	}
	for _, p := range order {
		if p.taken, p.err = scanProbe(br); p.err != nil {
			if !isServerError(p.err) {
				return nil, p.err
			}
			p.err = fmt.Errorf("postgres: probe: %w", p.err)
		}
	}
	return results, nil
}

// isServerError reports whether err is an error the server answered (a
// missing table, a type mismatch), not one of the connection.
func isServerError(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr)
}

// prepareProbe prepares sql on the connection, under its own text as its
// name, the first time a round trip carries it (pgx then uses the prepared
// statement): a probe the server refuses (a missing table) fails here, on
// its own, not in the pipeline with the batch statement, which pgx would
// not send. With the simple protocol nothing is prepared.
func (c *lockConn) prepareProbe(ctx context.Context, sql string) error {
	if c.conn.Config().DefaultQueryExecMode == pgx.QueryExecModeSimpleProtocol {
		return nil
	}
	_, err := c.conn.Prepare(ctx, sql, sql)
	return err
}

// scanProbe reads the rows of one probe: the values it found taken.
func scanProbe(br pgx.BatchResults) (map[string]bool, error) {
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	taken := make(map[string]bool)
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return nil, err
		}
		taken[v] = true
	}
	rows.Close()
	return taken, rows.Err()
}
