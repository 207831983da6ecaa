package postgres

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/claimbus/claimbus/claimstore"
	"github.com/claimbus/claimbus/claimstore/internal/claimcheck"
	"github.com/claimbus/claimbus/lockstore"
)

// batchMode is how the batch statements that join arrays to the table go:
// as unnamed statements, which the server plans at each run for the arrays
// given and the table's size now. A prepared statement's cached generic
// plan, made while the table was small (a new table has no statistics
// until autovacuum analyzes it, a minute or more later), joins the arrays
// to the table by a sequential scan, and keeps doing so as the table grows.
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
// newest version of a row. It returns the keys it wrote, each with its
// confirmed flag and whether it was the requester's own row before (read
// from the statement's snapshot, before the write): the requester's own
// row keeps its confirmed flag.
//
// It reads no table but through the conflict clause's unique index, so
// every plan of it is good whatever the table's size, and it is prepared
// (the pool's default mode) like the store's single statements: planning
// it at each run cost the server more than running it.
func (s *Store) reserveSQL() string {
	return `WITH req AS (
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int8[]) AS r(namespace, id, owner, lag)
	)
	INSERT INTO ` + s.reservations + ` AS t (namespace, id, owner, confirmed, at)
	SELECT namespace, id, owner, false, now() FROM req ORDER BY namespace, id
	ON CONFLICT (namespace, id) DO UPDATE SET owner = excluded.owner,
		confirmed = t.owner = excluded.owner AND t.confirmed, at = now()
	WHERE t.owner = excluded.owner OR (NOT t.confirmed AND t.at <= now() - interval '1 microsecond' *
		(SELECT req.lag FROM req WHERE req.namespace = excluded.namespace AND req.id = excluded.id))
	RETURNING t.namespace, t.id, t.confirmed,
		coalesce((SELECT o.owner = t.owner FROM ` + s.reservations + ` o WHERE o.namespace = t.namespace AND o.id = t.id), false)`
}

// holdersSQL reads the holders of the rows a reserveSQL did not write, in
// a statement of its own (whose snapshot, taken after the write ended,
// shows every holder the write saw committed, unless it changed since).
// It joins arrays to the table, so it goes unprepared (batchMode).
func (s *Store) holdersSQL() string {
	return `SELECT r.ord, c.owner, c.confirmed, floor(extract(epoch FROM now() - c.at) * 1000000)::int8
	FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS r(namespace, id, ord)
	LEFT JOIN ` + s.reservations + ` c ON c.namespace = r.namespace AND c.id = r.id`
}

// reserveBatch answers a batch of Reserve calls: one statement writes
// what it may, and when some rows were not written a second one reads
// their holders. It repeats for the requests whose holder the read did
// not show holding (the row changed between the two statements) until
// each is written or sees its holder.
func (s *Store) reserveBatch(ctx context.Context, reqs []reserveReq) ([]reserveRes, error) {
	out := make([]reserveRes, len(reqs))
	todo := make([]int, len(reqs)) // indexes into reqs still unanswered
	for i := range todo {
		todo[i] = i
	}
	for len(todo) > 0 {
		ns, ids, owners, lags := make([]string, len(todo)), make([]string, len(todo)), make([]string, len(todo)), make([]int64, len(todo))
		for j, i := range todo {
			ns[j], ids[j], owners[j], lags[j] = reqs[i].key.Namespace, reqs[i].key.ID, reqs[i].owner, reqs[i].lagMicros
		}
		written, err := s.reserveWrite(ctx, ns, ids, owners, lags)
		if err != nil {
			return nil, err
		}
		var left []int // indexes into reqs not written
		for _, i := range todo {
			if w, ok := written[reqs[i].key]; ok {
				out[i] = reserveRes{reserved: true}
				if w.own {
					out[i].held = claimstore.Reservation{Key: reqs[i].key, Owner: reqs[i].owner, Confirmed: w.confirmed}
				}
			} else {
				left = append(left, i)
			}
		}
		if todo, err = s.readHolders(ctx, reqs, left, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// reserveWrite runs reserveSQL and returns the keys it wrote.
func (s *Store) reserveWrite(ctx context.Context, ns, ids, owners []string, lags []int64) (map[lockstore.Key]writtenRow, error) {
	rows, err := s.pool.Query(ctx, s.reserveQ, ns, ids, owners, lags)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	written := make(map[lockstore.Key]writtenRow, len(ns))
	for rows.Next() {
		var k lockstore.Key
		var w writtenRow
		if err := rows.Scan(&k.Namespace, &k.ID, &w.confirmed, &w.own); err != nil {
			return nil, err
		}
		written[k] = w
	}
	return written, rows.Err()
}

// writtenRow is what reserveSQL reports of a row it wrote.
type writtenRow struct{ confirmed, own bool }

// readHolders sets out[i], for each i of left, to the holder of reqs[i]'s
// row, and returns the indexes whose row shows no holder that holds: they
// are to be sent again.
func (s *Store) readHolders(ctx context.Context, reqs []reserveReq, left []int, out []reserveRes) (again []int, err error) {
	if len(left) == 0 {
		return nil, nil
	}
	ns, ids := make([]string, len(left)), make([]string, len(left))
	for j, i := range left {
		ns[j], ids[j] = reqs[i].key.Namespace, reqs[i].key.ID
	}
	rows, err := s.pool.Query(ctx, s.holdersQ, batchMode, ns, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			ord       int64
			owner     *string
			confirmed *bool
			ageMicros *int64
		)
		if err := rows.Scan(&ord, &owner, &confirmed, &ageMicros); err != nil {
			return nil, err
		}
		i := left[ord-1]
		r := reqs[i]
		if owner == nil || *owner == r.owner || !*confirmed && *ageMicros >= r.lagMicros {
			// Not written, yet the row shows no holder that holds: it
			// changed since the write.
			again = append(again, i)
			continue
		}
		out[i] = reserveRes{held: claimstore.Reservation{
			Key: r.key, Owner: *owner, Confirmed: *confirmed, Age: max(time.Duration(*ageMicros)*time.Microsecond, 0),
		}}
	}
	return again, rows.Err()
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
