package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/claimbus/claimbus/internal/lockext"
)

// The probes of TryLockProbe, pipelined after a round trip's statement.

// probeRun is one probe query of a round trip: the values it asks about
// and, once run, those it found taken (with the second column of their
// rows, when the probe returns one), or its error.
type probeRun struct {
	values []string
	by     bool // the probe's rows have a second column (lockext.Probe.By)
	taken  map[string]string
	err    error
}

// probeKey tells a round trip's probe queries apart: the same SQL read
// with and without its second column is two queries.
type probeKey struct {
	sql string
	by  bool
}

// keyOf is the probeKey of probe.
func keyOf(probe *lockext.Probe) probeKey { return probeKey{probe.SQL, probe.By} }

// probesOf groups the probes of batch's lock requests by their SQL (and
// whether their rows have the second column), or returns nil when none
// has one.
func probesOf(batch []*request) map[probeKey]*probeRun {
	var probes map[probeKey]*probeRun
	for _, r := range batch {
		if r.probe == nil {
			continue
		}
		if probes == nil {
			probes = make(map[probeKey]*probeRun, 1)
		}
		p := probes[keyOf(r.probe)]
		if p == nil {
			p = &probeRun{by: r.probe.By}
			probes[keyOf(r.probe)] = p
		}
		p.values = append(p.values, r.probe.Value)
	}
	return probes
}

// queryProbing is query of the batch statement with the probes pipelined
// after it, in the same round trip: each probe is a statement of its own,
// so its snapshot is taken after the batch statement took its locks.
//
// A probe runs on a connection other keys' locks share, so nothing it does
// may end that connection: before the probes, in the same round trip, the
// batch sets statement_timeout for the rest of its (implicit) transaction
// to half the time left before the round trip's deadline (probeTimeout), so
// the server ends a slow probe, with an error, before the client would
// close the connection; the batch statement itself is not bounded, since a
// try-lock stopped part way leaves locks behind. A probe that fails, on the
// server (a missing table, that timeout) or in the client (a row that does
// not scan), fails its own requests. The rest of the pipeline after a
// failing probe goes unread (the server skips it), so the probes after it
// are sent again, in another round trip, while time is left
// (probeRetryLeft); those still unanswered fail. Only an error of the
// connection fails the round trip.
func (c *lockConn) queryProbing(ctx context.Context, n int, probes map[probeKey]*probeRun, args ...any) ([]int64, error) {
	order := make([]*probeRun, 0, len(probes))
	sqls := make([]string, 0, len(probes))
	for k, p := range probes {
		sql := k.sql
		if err := c.prepareProbe(ctx, sql); err != nil {
			if !isServerError(err) {
				return nil, err
			}
			p.err = fmt.Errorf("postgres: probe: %w", err)
			continue
		}
		order = append(order, p)
		sqls = append(sqls, sql)
	}
	if len(order) == 0 {
		return c.query(ctx, c.s.batchSQL, n, args...)
	}
	var results []int64
	for {
		var b pgx.Batch
		if results == nil {
			b.Queue(c.s.batchSQL, args...)
		}
		b.Queue(setProbeTimeoutSQL, probeTimeout(ctx))
		for i, p := range order {
			b.Queue(sqls[i], p.values)
		}
		br := c.conn.SendBatch(ctx, &b)
		res, settled, err := c.scanProbing(br, n, results == nil, order)
		if cerr := br.Close(); err == nil && cerr != nil && c.conn.IsClosed() {
			err = cerr // a probe's error leaves the connection open
		}
		if err != nil {
			return nil, err
		}
		if results == nil {
			results = res
		}
		if settled == len(order) {
			return results, nil
		}
		order, sqls = order[settled:], sqls[settled:]
		if !probeRetryLeft(ctx, c.s.cfg.Timeout) {
			for _, p := range order {
				p.err = errors.New("postgres: probe: not run: another probe of its round trip failed, and the round trip's time ran out")
			}
			return results, nil
		}
	}
}

// setProbeTimeoutSQL bounds the probes after it in its round trip: $1 is
// statement_timeout, until the round trip's implicit transaction ends.
const setProbeTimeoutSQL = `SELECT set_config('statement_timeout', $1, true)`

// probeTimeout is the statement_timeout of the probes of a round trip
// under ctx: half the time left before its deadline, at least 1ms, so that
// the server's error comes back before the client gives up.
func probeTimeout(ctx context.Context) string {
	left := time.Second
	if d, ok := ctx.Deadline(); ok {
		left = time.Until(d)
	}
	return strconv.FormatInt(max(left.Milliseconds()/2, 1), 10)
}

// probeRetryLeft reports whether the round trip under ctx has time left to
// send its skipped probes again: a quarter of Config.Timeout.
func probeRetryLeft(ctx context.Context, timeout time.Duration) bool {
	d, ok := ctx.Deadline()
	return !ok || time.Until(d) > timeout/4
}

// scanProbing reads the answers of one of queryProbing's batches: the
// batch statement's results (when withBatch), the statement timeout's,
// then each probe's, in order. It returns how many probes it settled, with
// an answer or their own error: all, or up to and including the first that
// failed, after which the server skipped the rest (an error on the server)
// or pgx reads no more (one in the client). Its error is one of the batch
// statement or of the connection.
func (c *lockConn) scanProbing(br pgx.BatchResults, n int, withBatch bool, order []*probeRun) ([]int64, int, error) {
	var results []int64
	if withBatch {
		rows, err := br.Query()
		if err != nil {
			return nil, 0, err
		}
		if results, err = scanResults(rows, n); err != nil {
			return nil, 0, err
		}
	}
	if _, err := br.Exec(); err != nil {
		return nil, 0, fmt.Errorf("set the probes' statement_timeout: %w", err)
	}
	for i, p := range order {
		if p.taken, p.err = scanProbe(br, p.by); p.err != nil {
			if c.conn.IsClosed() {
				return nil, 0, p.err
			}
			p.err = fmt.Errorf("postgres: probe: %w", p.err)
			return results, i + 1, nil
		}
	}
	return results, len(order), nil
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

// scanProbe reads the rows of one probe (see lockext.ScanTaken).
func scanProbe(br pgx.BatchResults, by bool) (map[string]string, error) {
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	return lockext.ScanTaken(rows, by)
}
