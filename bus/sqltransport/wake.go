package sqltransport

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// wake wakes the subscriptions of one table that wait for a notification.
type wake struct {
	mu sync.Mutex
	ch chan struct{} // closed and replaced at each notification
}

func newWake() *wake { return &wake{ch: make(chan struct{})} }

func (w *wake) signal() {
	w.mu.Lock()
	close(w.ch)
	w.ch = make(chan struct{})
	w.mu.Unlock()
}

// state returns a channel closed at the next notification.
func (w *wake) state() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ch
}

// wakeFor returns the wake of table, creating it.
func (t *Transport) wakeFor(table string) *wake {
	t.wakesMu.Lock()
	defer t.wakesMu.Unlock()
	w, ok := t.wakes[table]
	if !ok {
		w = newWake()
		t.wakes[table] = w
	}
	return w
}

// signal wakes the subscriptions of table, or of every table when table is
// empty (after a reconnection, when notifications may have been missed).
func (t *Transport) signal(table string) {
	t.wakesMu.Lock()
	defer t.wakesMu.Unlock()
	if table == "" {
		for _, w := range t.wakes {
			w.signal()
		}
		return
	}
	if w, ok := t.wakes[table]; ok {
		w.signal()
	}
}

// listen keeps a connection that LISTENs on notifyChannel and wakes the
// subscriptions of the tables it hears about, reconnecting after a
// failure, until ctx ends. conn is the first connection, already
// listening.
func (t *Transport) listen(ctx context.Context, conn *pgx.Conn) {
	defer t.wg.Done()
	for {
		for conn != nil {
			n, err := conn.WaitForNotification(ctx)
			if err != nil {
				_ = conn.Close(context.Background())
				conn = nil
				if ctx.Err() != nil {
					return
				}
				t.logger.Error("LISTEN connection lost; polling until it is back", err, nil)
				// The database may have crashed and forgotten commands or
				// replies in flight, or may stay down: their senders hear
				// of it now rather than at their deadline.
				t.lost(err)
				break
			}
			t.signal(n.Payload)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(t.cfg.RetryInterval):
		}
		c, err := t.connectListener(ctx)
		if err != nil {
			if ctx.Err() == nil {
				t.logger.Error("Cannot reconnect the LISTEN connection", err, nil)
			}
			continue
		}
		conn = c
		t.signal("") // what was missed meanwhile
	}
}

// connectListener opens a connection outside the pool and LISTENs.
func (t *Transport) connectListener(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, t.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+notifyChannel); err != nil {
		_ = conn.Close(context.Background())
		return nil, err
	}
	return conn, nil
}
