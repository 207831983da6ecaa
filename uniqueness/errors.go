package uniqueness

import (
	"errors"

	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/middleware"
)

var (
	// ErrAlreadyTaken is returned by Claimer.Claim when the value is already
	// taken: the lookup found it, or a claimant ahead of this one in the same
	// process found it while holding the key. It is the same value as
	// middleware.ErrAlreadyTaken, so errors.Is matches it against the
	// structured already_taken rejection a sender gets back.
	ErrAlreadyTaken error = middleware.ErrAlreadyTaken

	// ErrClaimLost is the cause (context.Cause) of a handler's context
	// cancelled by the Uniqueness middleware because a claim of its command
	// was lost (a lease ran out, a lock connection broke): another claimant
	// may now hold the value, so the handler should stop before it writes.
	// A lost claim is a lost lock: it is the same value as
	// lockstore.ErrLockLost, as the Lock middleware's and idempotency's
	// causes are.
	ErrClaimLost = lockstore.ErrLockLost

	// ErrNoReservations is returned by Middleware.Free for a scope none of
	// whose rules reserves (uniqueness.Reserve).
	ErrNoReservations = errors.New("uniqueness: no rule of this scope reserves")

	// errNilLookup is returned by Claim when the lookup function is nil.
	errNilLookup = errors.New("uniqueness: nil lookup function (Claim needs a func(ctx) (taken bool, err error))")
	// errNilLocker is returned by Claim on a Claimer made without a Locker.
	errNilLocker = errors.New("uniqueness: nil Locker (give a lockstore store, such as lockstore.NewMemory)")
)
