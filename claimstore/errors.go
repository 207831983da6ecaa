package claimstore

import "github.com/claimbus/claimbus/claimstore/internal/claimcheck"

var (
	// ErrNotReserved is returned by Confirm when the key is not reserved by
	// the owner: never reserved, cancelled, dropped, or handed over to
	// another claimant after its owner lost the claim.
	ErrNotReserved = claimcheck.ErrNotReserved

	// ErrInvalid is returned for an argument a store cannot take: an invalid
	// key (it also matches lockstore.ErrInvalidKey), an empty owner, a
	// negative duration, a retention or limit that is not positive.
	ErrInvalid = claimcheck.ErrInvalid

	// ErrUnavailable is returned by a backend when its database could not
	// be reached or dropped the connection: the call may be tried again.
	// It also matches lockstore.ErrUnavailable.
	ErrUnavailable = claimcheck.ErrUnavailable
)
