package uniqueness

import (
	"errors"
)

var (
	// ErrNoReservations is returned by Middleware.Free for a scope none of
	// whose rules reserves (uniqueness.Reserve).
	ErrNoReservations = errors.New("uniqueness: no rule of this scope reserves")

	// errNilLookup is returned by Claim when the lookup function is nil.
	errNilLookup = errors.New("uniqueness: nil lookup function (Claim needs a func(ctx) (taken bool, err error))")
	// errNilLocker is returned by Claim on a claimer made without a Locker.
	errNilLocker = errors.New("uniqueness: nil Locker (give a lockstore store, such as lockstore.NewMemory)")
)
