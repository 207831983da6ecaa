package postgres

import (
	"context"
	"fmt"
	"strconv"

	"github.com/claimbus/claimbus/lockstore"
)

// heldSQL lists the two-int advisory locks granted now in this database,
// with the application_name of the session holding each.
const heldSQL = `
SELECT l.classid::int8, l.objid::int8, l.pid, coalesce(a.application_name, '')
FROM pg_locks l
LEFT JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.objsubid = 2 AND l.granted
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
ORDER BY l.classid, l.objid, l.pid`

// Held lists the two-int advisory locks held now in the store's database,
// by every node (it reads pg_locks and pg_stat_activity on the pool, so do
// not call it on a hot path). For this store's own locks each Holder is
// complete: key, token, acquisition time and Config.Node. For other locks
// (other nodes', and this node's Serialize and Exclusive locks) only the
// lock id is known: Key.Namespace is the registered name of the namespace
// number or the number in decimal, Key.ID the id number in decimal, Token
// is 0, AcquiredAt is zero and Node is the session's application_name.
func (s *Store) Held(ctx context.Context) ([]lockstore.Holder, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	conns := s.lockConns()
	own := make(map[uint32]*lockConn, len(conns))
	for _, c := range conns {
		c.mu.Lock()
		if c.pid != 0 {
			own[c.pid] = c
		}
		c.mu.Unlock()
	}
	rows, err := s.pool.Query(ctx, heldSQL)
	if err != nil {
		return nil, fmt.Errorf("postgres: held: %w", err)
	}
	defer rows.Close()
	var out []lockstore.Holder
	for rows.Next() {
		var classid, objid int64
		var pid uint32
		var app string
		if err := rows.Scan(&classid, &objid, &pid, &app); err != nil {
			return nil, fmt.Errorf("postgres: held: %w", err)
		}
		id := LockID{Namespace: int32(uint32(classid)), ID: int32(uint32(objid))}
		if c := own[pid]; c != nil {
			c.mu.Lock()
			l := c.held[id]
			c.mu.Unlock()
			if l != nil {
				out = append(out, lockstore.Holder{Key: l.key, Token: l.token, AcquiredAt: l.at, Node: s.cfg.Node})
				continue
			}
		}
		ns, ok := s.names[id.Namespace]
		if !ok {
			ns = strconv.FormatInt(int64(id.Namespace), 10)
		}
		out = append(out, lockstore.Holder{
			Key:  lockstore.Key{Namespace: ns, ID: strconv.FormatInt(int64(id.ID), 10)},
			Node: app,
		})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: held: %w", err)
	}
	return out, nil
}

var _ lockstore.Store = (*Store)(nil)
