package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync"
)

// Fencing tokens of Serialize and Exclusive.
//
// A token must be greater than every token handed out before for its key,
// across restarts of the store on the same file, so it cannot come from
// memory alone. The table claimbus_token holds a high-water mark: every
// token handed out is below it. New reserves a block of tokens by moving
// the mark up one block, in a transaction committed with synchronous =
// FULL (so that the reservation survives a power loss, whatever the DSN's
// synchronous setting), and hands tokens out of the block in memory,
// contiguously. When half of the block is used, an outermost Serialize or
// Exclusive (which holds no write lock yet) reserves the next one; a
// reservation is durable before any token of it is handed out. A restart
// starts at the mark, above every token of the last run. A token costs a
// mutex, and a reservation one write every tokenBlock/2 tokens.

// tokenBlock is how many tokens one reservation covers.
const tokenBlock = 1 << 32

// tokenTable holds the high-water mark (created by the migrations: see
// migrations/).
const tokenTable = "claimbus_token"

// errTokensExhausted is returned in the unlikely case that a transaction
// needs a token when the whole reserved block is used (a reservation needs
// the write lock the transaction holds).
var errTokensExhausted = errors.New("sqlite: the reserved fencing tokens are used up; retry")

// tokenSource hands out the tokens of one Store.
type tokenSource struct {
	db *sql.DB

	reserving sync.Mutex // one reservation at a time

	mu    sync.Mutex
	next  int64 // the next token
	limit int64 // every token below it is reserved durably
	block int64 // the size of a reservation
}

// newTokenSource reserves the first block (the table is the migrations').
func newTokenSource(ctx context.Context, db *sql.DB) (*tokenSource, error) {
	ts := &tokenSource{db: db, block: tokenBlock}
	start, limit, err := ts.reserve(ctx, 1)
	if err != nil {
		return nil, err
	}
	ts.next, ts.limit = start, limit
	return ts, nil
}

// draw hands out the next token. It does no I/O; it fails only when the
// block is used up (see errTokensExhausted).
func (ts *tokenSource) draw() (int64, error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.next >= ts.limit {
		return 0, errTokensExhausted
	}
	t := ts.next
	ts.next++
	return t, nil
}

// refill reserves the next block once half of the current one is used.
// Call it outside any transaction of the store's database: the reservation
// takes the write lock. It fails only when the reservation failed and no
// token is left.
func (ts *tokenSource) refill(ctx context.Context) error {
	if !ts.low() {
		return nil
	}
	ts.reserving.Lock()
	defer ts.reserving.Unlock()
	if !ts.low() {
		return nil // reserved while we waited
	}
	ts.mu.Lock()
	from := ts.limit
	ts.mu.Unlock()
	_, limit, err := ts.reserve(ctx, from)
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if err != nil {
		if ts.next < ts.limit {
			return nil // the next call tries again
		}
		return fmt.Errorf("sqlite: reserve fencing tokens: %w", err)
	}
	ts.limit = limit
	return nil
}

// low reports whether half of the reserved block is used.
func (ts *tokenSource) low() bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.limit-ts.next < ts.block/2
}

// reserve moves the high-water mark up by one block from the larger of
// the stored mark and from, durably, and returns the block [start, limit).
func (ts *tokenSource) reserve(ctx context.Context, from int64) (start, limit int64, err error) {
	ts.mu.Lock()
	block := ts.block
	ts.mu.Unlock()
	conn, err := ts.db.Conn(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = conn.Close() }()
	var prev string
	if err := conn.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&prev); err != nil {
		return 0, 0, err
	}
	if _, err := conn.ExecContext(ctx, "PRAGMA synchronous = FULL"); err != nil {
		return 0, 0, err
	}
	defer func() {
		if _, rerr := conn.ExecContext(context.WithoutCancel(ctx), "PRAGMA synchronous = "+prev); rerr != nil {
			// Not back to the pool with the wrong setting.
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
	}()
	err = func() error {
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback() }()
		var stored int64
		err = tx.QueryRowContext(ctx, "SELECT next FROM "+tokenTable+" WHERE id = 1").Scan(&stored)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		start = max(stored, from, 1)
		limit = start + block
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+tokenTable+" (id, next) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET next = excluded.next", limit); err != nil {
			return err
		}
		return tx.Commit()
	}()
	if err != nil {
		return 0, 0, err
	}
	return start, limit, nil
}
