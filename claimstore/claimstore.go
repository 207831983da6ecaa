package claimstore

import (
	"context"
	"time"

	"github.com/claimbus/claimbus/lockstore"
)

// Reservation is the durable record that a value (the Key's ID, in the
// Key's Namespace: a uniqueness rule's scope) is taken.
type Reservation struct {
	Key lockstore.Key
	// Owner is the id of the command that reserved the value.
	Owner string
	// Confirmed is set once the owner's handler succeeded; a pending
	// reservation (Confirmed false) is in doubt when its owner is gone.
	Confirmed bool
	// Age is how long ago the reservation was written or confirmed, by the
	// store's clock.
	Age time.Duration
}

// Reservations keeps reservations. Every method is safe for concurrent use.
// Reserve, Confirm and Cancel are called by the holder of the key's claim
// (the lock on the key), which is what makes them race-free across nodes;
// Drop and List may be called by anyone.
type Reservations interface {
	// Reserve writes a pending reservation of key owned by owner, and
	// reports reserved, unless the value is held by another: then it
	// writes nothing and returns the holder's reservation. The value is
	// held by another when it has a confirmed reservation of another
	// owner, or a pending one of another owner younger than maxLag (in
	// doubt: see the package documentation). A reservation of owner itself
	// (a redelivered command) is kept as it is, confirmed or pending, its
	// age restarted, and reported reserved with held set to it (held.Owner
	// is owner): the caller must not cancel it, since the owner's earlier
	// run may have written the value.
	Reserve(ctx context.Context, key lockstore.Key, owner string, maxLag time.Duration) (held Reservation, reserved bool, err error)
	// Confirm marks owner's reservation of key confirmed, and restarts its
	// age. It returns an error matching ErrNotReserved when key is not
	// reserved by owner.
	Confirm(ctx context.Context, key lockstore.Key, owner string) error
	// Cancel deletes owner's pending reservation of key, so that the value
	// is free at once. A confirmed reservation, or one of another owner, is
	// left as it is, and Cancel returns nil.
	Cancel(ctx context.Context, key lockstore.Key, owner string) error
	// Drop deletes the reservation of key, whoever holds it: once the read
	// model shows the value (it is taken for good), or when the application
	// frees the value.
	Drop(ctx context.Context, key lockstore.Key) error
	// List returns up to limit reservations in namespace whose IDs sort
	// after the ID after (byte order), in that order: pages of the
	// reservations, for a sweeper.
	List(ctx context.Context, namespace, after string, limit int) ([]Reservation, error)
}

// Outcome is the stored answer of an idempotent command's first run.
type Outcome struct {
	// Fingerprint identifies the command's payload, so that a repeat with
	// another payload under the same key can be told apart.
	Fingerprint []byte
	// Result is the command's result as JSON, when it succeeded.
	Result []byte
	// Err is the command's rejection in the wire form of bus replies (JSON
	// {"rejection":{"code":...},"message":...}, the claimbus_error
	// metadata of a reply), when it was rejected; nil when it
	// succeeded.
	Err []byte
}

// Outcomes keeps the outcomes of idempotent commands. Every method is safe
// for concurrent use.
type Outcomes interface {
	// Outcome returns the outcome stored under key whose retention has not
	// passed, and whether there is one.
	Outcome(ctx context.Context, key lockstore.Key) (Outcome, bool, error)
	// SaveOutcome stores o under key for retention, replacing any outcome
	// stored there.
	SaveOutcome(ctx context.Context, key lockstore.Key, o Outcome, retention time.Duration) error
	// PurgeOutcomes deletes up to limit outcomes whose retention has
	// passed and returns how many it deleted.
	PurgeOutcomes(ctx context.Context, limit int) (int, error)
}

// Store keeps both reservations and outcomes.
type Store interface {
	Reservations
	Outcomes
}
