package postgres

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/claimbus/claimbus/lockstore"
)

// watcher checks that the sessions of running Exclusive calls still hold
// their locks, for all of them in one query every Config.KeepAlive, on a
// connection of its own opened from the lock connections' configuration,
// never through the application's pool (an exhausted pool must not look
// like a loss). One goroutine, which the store's wait group counts, owns
// the connection; it starts with the first Exclusive and stops when the
// store closes.
//
// A call's fn ctx is cancelled, with a cause matching lockstore.ErrLockLost,
// when a check finds its session no longer holding the lock, or when no
// check has succeeded within Config.LeaseBound since the last one that
// confirmed it (each check is bounded by Timeout and by that bound; a
// failed one reconnects). So a lost lock stops fn within LeaseBound.
type watcher struct {
	s    *Store
	wake chan struct{} // a hold was added

	mu    sync.Mutex
	holds map[*exclusiveHold]struct{}
}

// watch has the store's watcher check h, starting it with the first
// Exclusive. It fails with lockstore.ErrClosed once Close has begun.
func (cs *calls) watch(s *Store, h *exclusiveHold) error {
	cs.mu.Lock()
	if cs.closed {
		cs.mu.Unlock()
		return lockstore.ErrClosed
	}
	w := cs.watcher
	if w == nil {
		w = &watcher{s: s, wake: make(chan struct{}, 1), holds: make(map[*exclusiveHold]struct{})}
		cs.watcher = w
		// Under cs.mu, which closeAll takes before Close waits for the
		// wait group: the Add comes before that Wait.
		s.wg.Add(1)
		go w.run()
	}
	cs.mu.Unlock()

	w.mu.Lock()
	w.holds[h] = struct{}{}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
	return nil
}

// unwatch stops checking h, before its unlock.
func (cs *calls) unwatch(h *exclusiveHold) {
	cs.mu.Lock()
	w := cs.watcher
	cs.mu.Unlock()
	w.mu.Lock()
	delete(w.holds, h)
	w.mu.Unlock()
}

// run checks the holds every KeepAlive while there are any, and expires
// those not confirmed within LeaseBound, until the store closes.
func (w *watcher) run() {
	defer w.s.wg.Done()
	ctx, cfg := w.s.ctx, w.s.cfg
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			closeConn(conn)
		}
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var lastSent time.Time
	for {
		holds, expiry := w.snapshot()
		if len(holds) == 0 {
			select {
			case <-ctx.Done():
				return
			case <-w.wake:
				continue
			}
		}
		next := lastSent.Add(cfg.KeepAlive)
		if expiry.Before(next) {
			next = expiry
		}
		if wait := time.Until(next); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return
			case <-w.wake:
				timer.Stop()
				continue
			case <-timer.C:
			}
		}
		lastSent = time.Now()
		deadline := lastSent.Add(cfg.Timeout)
		if expiry.Before(deadline) {
			deadline = expiry
		}
		err := w.check(ctx, &conn, holds, deadline)
		if ctx.Err() != nil {
			return
		}
		w.expire(time.Now(), err)
	}
}

// snapshot returns the holds to check and the earliest time one of them
// expires.
func (w *watcher) snapshot() ([]*exclusiveHold, time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	holds := make([]*exclusiveHold, 0, len(w.holds))
	var expiry time.Time
	for h := range w.holds {
		holds = append(holds, h)
		if e := h.confirmed.Add(w.s.cfg.LeaseBound); expiry.IsZero() || e.Before(expiry) {
			expiry = e
		}
	}
	return holds, expiry
}

// sessionsHoldSQL returns the positions (from 1) of the (pid, namespace,
// id) triples whose backend does not hold that session advisory lock.
const sessionsHoldSQL = `
	SELECT h.i FROM unnest($1::int8[], $2::int8[], $3::int8[]) WITH ORDINALITY AS h(pid, ns, id, i)
	WHERE NOT EXISTS (
		SELECT 1 FROM pg_locks l
		WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
		  AND l.pid = h.pid AND l.classid::int8 = h.ns AND l.objid::int8 = h.id)`

// check asks, before deadline, which of holds their sessions still hold,
// connecting first when there is no connection. A failed query on a
// connection opened earlier (a stale one: the server may have ended the
// idle session) is retried once on a new connection. It confirms the holds
// found held and stops those found lost; on error it closes the connection.
func (w *watcher) check(ctx context.Context, conn **pgx.Conn, holds []*exclusiveHold, deadline time.Time) error {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	pids := make([]int64, len(holds))
	nss := make([]int64, len(holds))
	ids := make([]int64, len(holds))
	for i, h := range holds {
		pids[i], nss[i], ids[i] = int64(h.pid), int64(h.id.Namespace), int64(h.id.ID)
	}
	var err error
	for attempt := 0; attempt < 2; attempt++ {
		fresh := *conn == nil
		if fresh {
			if *conn, err = w.connect(ctx); err != nil {
				return fmt.Errorf("connect: %w", err)
			}
		}
		sent := time.Now()
		var lost []int64
		rows, qerr := (*conn).Query(ctx, sessionsHoldSQL, pids, nss, ids)
		if qerr == nil {
			lost, qerr = pgx.CollectRows(rows, pgx.RowTo[int64])
		}
		if qerr == nil {
			w.confirm(holds, lost, sent)
			return nil
		}
		err = qerr
		closeConn(*conn)
		*conn = nil
		if fresh {
			break
		}
	}
	return err
}

// connect opens the watcher's connection.
func (w *watcher) connect(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, w.s.connConfig)
	if err != nil {
		return nil, err
	}
	// An idle_session_timeout (PostgreSQL 14+) would end the session
	// between two bursts of Exclusive calls.
	if _, err := conn.Exec(ctx, `SELECT set_config(name, '0', false) FROM pg_settings WHERE name = 'idle_session_timeout'`); err != nil {
		closeConn(conn)
		return nil, err
	}
	return conn, nil
}

// confirm records a check sent at sent: the holds at the positions in lost
// (from 1) are lost, the others confirmed. Holds whose Exclusive has ended
// meanwhile are left alone: their unlock is not a loss.
func (w *watcher) confirm(holds []*exclusiveHold, lost []int64, sent time.Time) {
	isLost := make(map[int]bool, len(lost))
	for _, i := range lost {
		isLost[int(i)-1] = true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, h := range holds {
		if _, ok := w.holds[h]; !ok {
			continue
		}
		if isLost[i] {
			delete(w.holds, h)
			h.call.lose(fmt.Errorf("%w: the session (backend pid %d) no longer holds it", lockstore.ErrLockLost, h.pid))
			continue
		}
		h.confirmed = sent
	}
}

// expire stops the holds that no check has confirmed within LeaseBound.
// checkErr is the last check's error, if it failed.
func (w *watcher) expire(now time.Time, checkErr error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for h := range w.holds {
		if now.Before(h.confirmed.Add(w.s.cfg.LeaseBound)) {
			continue
		}
		delete(w.holds, h)
		err := fmt.Errorf("%w: no check confirmed that the session (backend pid %d) holds it within %v", lockstore.ErrLockLost, h.pid, w.s.cfg.LeaseBound)
		if checkErr != nil {
			err = fmt.Errorf("%w: %w", err, checkErr)
		}
		h.call.lose(err)
	}
}
