// Package claimcheck holds the checks every claimstore backend makes of its
// arguments before any I/O, so that they all refuse the same calls the
// same way, with errors matching ErrInvalid.
package claimcheck

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/claimbus/claimbus/lockstore"
)

// The errors claimstore exports (see there).
var (
	ErrNotReserved = errors.New("claimstore: the value is not reserved by this owner")
	ErrInvalid     = errors.New("claimstore: invalid argument")
)

// Key checks ctx and key.
func Key(ctx context.Context, key lockstore.Key) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := key.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// Owned checks ctx, key and a non-empty owner.
func Owned(ctx context.Context, key lockstore.Key, owner string) error {
	if err := Key(ctx, key); err != nil {
		return err
	}
	if owner == "" {
		return fmt.Errorf("%w: empty owner", ErrInvalid)
	}
	return nil
}

// Reserve checks the arguments of Reserve.
func Reserve(ctx context.Context, key lockstore.Key, owner string, maxLag time.Duration) error {
	if err := Owned(ctx, key, owner); err != nil {
		return err
	}
	if maxLag < 0 {
		return fmt.Errorf("%w: negative maxLag (%v)", ErrInvalid, maxLag)
	}
	return nil
}

// List checks the arguments of List.
func List(ctx context.Context, namespace string, limit int) error {
	if err := Key(ctx, lockstore.Key{Namespace: namespace, ID: "x"}); err != nil {
		return err
	}
	return Limit(limit)
}

// Limit checks a limit of at least 1.
func Limit(limit int) error {
	if limit < 1 {
		return fmt.Errorf("%w: limit %d is below 1", ErrInvalid, limit)
	}
	return nil
}

// Save checks the arguments of SaveOutcome.
func Save(ctx context.Context, key lockstore.Key, retention time.Duration) error {
	if err := Key(ctx, key); err != nil {
		return err
	}
	if retention <= 0 {
		return fmt.Errorf("%w: retention %v is not positive", ErrInvalid, retention)
	}
	return nil
}

// Purge checks the arguments of PurgeOutcomes.
func Purge(ctx context.Context, limit int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return Limit(limit)
}

// NotReserved is the error of Confirm when key is not reserved by owner.
func NotReserved(key lockstore.Key, owner string) error {
	return fmt.Errorf("%w: %s by %.40q", ErrNotReserved, key, owner)
}

// ErrUnavailable is the error claimstore exports (see there).
var ErrUnavailable = fmt.Errorf("claimstore: the store is unavailable: %w", lockstore.ErrUnavailable)

// Micros returns d in whole microseconds, rounded up: a maxLag or a
// retention is never cut short by a store that counts microseconds.
func Micros(d time.Duration) int64 {
	us := int64(d / time.Microsecond)
	if d%time.Microsecond > 0 {
		us++
	}
	return us
}
