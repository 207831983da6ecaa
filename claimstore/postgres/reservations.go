package postgres

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/claimbus/claimbus/claimstore"
	"github.com/claimbus/claimbus/internal/claimcheck"
	"github.com/claimbus/claimbus/lockstore"
)

// batchMode is how the batch statements go: as unnamed statements, which
// the server plans at each run for the arrays given and the table's size
// now. A prepared statement's cached generic plan, made while the table
// was small (a new table has no statistics until autovacuum analyzes it,
// a minute or more later), joins the arrays to the table by a sequential
// scan, and keeps doing so as the table grows.
const batchMode = pgx.QueryExecModeExec

// reserveReq is one call of Reserve; lagMicros is its maxLag in whole
// microseconds, rounded up (PostgreSQL's timestamps count microseconds).
type reserveReq struct {
	key       lockstore.Key
	owner     string
	lagMicros int64
}

func (r reserveReq) rowKey() string { return r.key.Namespace + "\x00" + r.key.ID }

type reserveRes struct {
	held     claimstore.Reservation
	reserved bool
}

// ownedReq is one call of Confirm or Cancel.
type ownedReq struct {
	key   lockstore.Key
	owner string
}

// Reserve implements claimstore.Reservations. Calls made while another
// runs go to the server together, in one statement.
func (s *Store) Reserve(ctx context.Context, key lockstore.Key, owner string, maxLag time.Duration) (claimstore.Reservation, bool, error) {
	if err := claimcheck.Reserve(ctx, key, owner, maxLag); err != nil {
		return claimstore.Reservation{}, false, err
	}
	r, err := s.reserve.do(ctx, reserveReq{key: key, owner: owner, lagMicros: claimcheck.Micros(maxLag)})
	if err != nil {
		return claimstore.Reservation{}, false, s.fail(ctx, "Reserve", err)
	}
	return r.held, r.reserved, nil
}

// reserveSQL writes the pending reservations of a batch of requests (whose
// keys are distinct) where they may: the row is free, or the requester's,
// or pending and at least lag old. The conflict clause sees, and locks, the
// newest version of a row; the left join on the table, for the holders of
// the rows not written, reads the statement's snapshot, which may miss a
// row committed since it began (or show an older version of it): the
// caller tries those requests again.
func (s *Store) reserveSQL() string {
	return `WITH req AS (
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int8[]) WITH ORDINALITY AS r(namespace, id, owner, lag, ord)
	), ins AS (
		INSERT INTO ` + s.reservations + ` AS t (namespace, id, owner, confirmed, at)
		SELECT namespace, id, owner, false, now() FROM req ORDER BY namespace, id
		ON CONFLICT (namespace, id) DO UPDATE SET owner = excluded.owner, confirmed = false, at = now()
		WHERE t.owner = excluded.owner OR (NOT t.confirmed AND t.at <= now() - interval '1 microsecond' *
			(SELECT req.lag FROM req WHERE req.namespace = excluded.namespace AND req.id = excluded.id))
		RETURNING t.namespace, t.id
	)
	SELECT req.ord, ins.id IS NOT NULL, cur.owner, cur.confirmed,
		floor(extract(epoch FROM now() - cur.at) * 1000000)::int8
	FROM req
	LEFT JOIN ins ON ins.namespace = req.namespace AND ins.id = req.id
	LEFT JOIN LATERAL (SELECT c.owner, c.confirmed, c.at FROM ` + s.reservations + ` c
		WHERE ins.id IS NULL AND c.namespace = req.namespace AND c.id = req.id) cur ON true`
}

// reserveBatch answers a batch of Reserve calls, in as many statements as
// it takes for every request to be written or to see its holder.
func (s *Store) reserveBatch(ctx context.Context, reqs []reserveReq) ([]reserveRes, error) {
	out := make([]reserveRes, len(reqs))
	todo := make([]int, len(reqs)) // indexes into reqs still unanswered
	for i := range todo {
		todo[i] = i
	}
	q := s.reserveSQL()
	for len(todo) > 0 {
		ns, ids, owners, lags := make([]string, len(todo)), make([]string, len(todo)), make([]string, len(todo)), make([]int64, len(todo))
		for j, i := range todo {
			ns[j], ids[j], owners[j], lags[j] = reqs[i].key.Namespace, reqs[i].key.ID, reqs[i].owner, reqs[i].lagMicros
		}
		rows, err := s.pool.Query(ctx, q, batchMode, ns, ids, owners, lags)
		if err != nil {
			return nil, err
		}
		var again []int
		for rows.Next() {
			var (
				ord       int64
				written   bool
				owner     *string
				confirmed *bool
				ageMicros *int64
			)
			if err := rows.Scan(&ord, &written, &owner, &confirmed, &ageMicros); err != nil {
				rows.Close()
				return nil, err
			}
			i := todo[ord-1]
			r := reqs[i]
			switch {
			case written:
				out[i] = reserveRes{reserved: true}
			case owner == nil || *owner == r.owner || !*confirmed && *ageMicros >= r.lagMicros:
				// Not written, yet the snapshot shows no holder that
				// holds: the row changed since the statement began.
				again = append(again, i)
			default:
				out[i] = reserveRes{held: claimstore.Reservation{
					Key: r.key, Owner: *owner, Confirmed: *confirmed, Age: max(time.Duration(*ageMicros)*time.Microsecond, 0),
				}}
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		todo = again
	}
	return out, nil
}

// Confirm implements claimstore.Reservations. Calls made while another
// runs go to the server together, in one statement.
func (s *Store) Confirm(ctx context.Context, key lockstore.Key, owner string) error {
	if err := claimcheck.Owned(ctx, key, owner); err != nil {
		return err
	}
	ok, err := s.confirm.do(ctx, ownedReq{key: key, owner: owner})
	if err != nil {
		return s.fail(ctx, "Confirm", err)
	}
	if !ok {
		return claimcheck.NotReserved(key, owner)
	}
	return nil
}

func (s *Store) confirmBatch(ctx context.Context, reqs []ownedReq) ([]bool, error) {
	ns, ids, owners := ownedArrays(reqs)
	rows, err := s.pool.Query(ctx, `UPDATE `+s.reservations+` t SET confirmed = true, at = now()
		FROM unnest($1::text[], $2::text[], $3::text[]) AS r(namespace, id, owner)
		WHERE t.namespace = r.namespace AND t.id = r.id AND t.owner = r.owner
		RETURNING t.namespace, t.id, t.owner`, batchMode, ns, ids, owners)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	confirmed := make(map[ownedReq]bool, len(reqs))
	for rows.Next() {
		var r ownedReq
		if err := rows.Scan(&r.key.Namespace, &r.key.ID, &r.owner); err != nil {
			return nil, err
		}
		confirmed[r] = true
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	out := make([]bool, len(reqs))
	for i, r := range reqs {
		out[i] = confirmed[r]
	}
	return out, nil
}

// Cancel implements claimstore.Reservations. Calls made while another runs
// go to the server together, in one statement.
func (s *Store) Cancel(ctx context.Context, key lockstore.Key, owner string) error {
	if err := claimcheck.Owned(ctx, key, owner); err != nil {
		return err
	}
	if _, err := s.cancel.do(ctx, ownedReq{key: key, owner: owner}); err != nil {
		return s.fail(ctx, "Cancel", err)
	}
	return nil
}

func (s *Store) cancelBatch(ctx context.Context, reqs []ownedReq) ([]struct{}, error) {
	ns, ids, owners := ownedArrays(reqs)
	_, err := s.pool.Exec(ctx, `DELETE FROM `+s.reservations+` t
		USING unnest($1::text[], $2::text[], $3::text[]) AS r(namespace, id, owner)
		WHERE t.namespace = r.namespace AND t.id = r.id AND t.owner = r.owner AND NOT t.confirmed`, batchMode, ns, ids, owners)
	if err != nil {
		return nil, err
	}
	return make([]struct{}, len(reqs)), nil
}

// ownedArrays returns the columns of reqs, sorted by key so that
// concurrent batches (of other nodes too) lock their rows in one order.
func ownedArrays(reqs []ownedReq) (ns, ids, owners []string) {
	sorted := slices.SortedFunc(slices.Values(reqs), func(a, b ownedReq) int {
		return cmp.Or(cmp.Compare(a.key.Namespace, b.key.Namespace), cmp.Compare(a.key.ID, b.key.ID))
	})
	ns, ids, owners = make([]string, len(reqs)), make([]string, len(reqs)), make([]string, len(reqs))
	for i, r := range sorted {
		ns[i], ids[i], owners[i] = r.key.Namespace, r.key.ID, r.owner
	}
	return ns, ids, owners
}

// Drop implements claimstore.Reservations.
func (s *Store) Drop(ctx context.Context, key lockstore.Key) error {
	if err := claimcheck.Key(ctx, key); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, `DELETE FROM `+s.reservations+` WHERE namespace = $1 AND id = $2`, key.Namespace, key.ID)
	if err != nil {
		return s.fail(ctx, "Drop", err)
	}
	return nil
}

// List implements claimstore.Reservations.
func (s *Store) List(ctx context.Context, namespace, after string, limit int) ([]claimstore.Reservation, error) {
	if err := claimcheck.List(ctx, namespace, limit); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT id, owner, confirmed, floor(extract(epoch FROM now() - at) * 1000000)::int8
		FROM `+s.reservations+` WHERE namespace = $1 AND id > $2 ORDER BY id LIMIT $3`, namespace, after, limit)
	if err != nil {
		return nil, s.fail(ctx, "List", err)
	}
	defer rows.Close()
	var out []claimstore.Reservation
	for rows.Next() {
		r := claimstore.Reservation{Key: lockstore.Key{Namespace: namespace}}
		var ageMicros int64
		if err := rows.Scan(&r.Key.ID, &r.Owner, &r.Confirmed, &ageMicros); err != nil {
			return nil, s.fail(ctx, "List", err)
		}
		r.Age = max(time.Duration(ageMicros)*time.Microsecond, 0)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail(ctx, "List", err)
	}
	return out, nil
}
