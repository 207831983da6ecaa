package idempotency

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/claimbus/claimbus/claimstore"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/middleware"
)

// Defaults of Config.
const (
	// DefaultNamespace prefixes the namespace of the locks and outcomes
	// when Config.Namespace is empty.
	DefaultNamespace = "idempotency"
	// defaultLockTimeout bounds the wait of a repeat for the run ahead of
	// it when Config.LockTimeout is zero.
	defaultLockTimeout = 15 * time.Second
	// defaultPurgeBatch is how many expired outcomes one PurgeOutcomes call
	// deletes when Config.PurgeBatch is zero.
	defaultPurgeBatch = 1000
)

// KeyFunc returns the idempotency key of the command p carries; "" means
// the command is not idempotent, and passes through untouched.
type KeyFunc func(p *middleware.Pipeline) string

// FingerprintFunc returns what identifies a command's payload, so that a
// repeat with another payload under the same key can be told apart.
type FingerprintFunc func(cmd any) ([]byte, error)

// CommandUUID is the default KeyFunc: the command's UUID (the Watermill
// message UUID), which is the same for every redelivery of one message.
// A sender that retries a request makes a new message with a new UUID:
// give such commands a key of their own (a field the client sets, an
// Idempotency-Key header) with a KeyFunc.
func CommandUUID(p *middleware.Pipeline) string { return p.CommandUUID }

// SHA256JSON is the default FingerprintFunc: the SHA-256 of the command's
// JSON encoding.
func SHA256JSON(cmd any) ([]byte, error) {
	b, err := json.Marshal(cmd)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	return sum[:], nil
}

// Config configures the idempotency middleware.
type Config struct {
	// Locker takes the lock on each idempotency key while its first run
	// runs, so that a repeat waits for it. Required. Every node that
	// handles the commands must use lockers that see each other's locks
	// (the PostgreSQL store on one database); the memory store serves one
	// process.
	Locker lockstore.Locker
	// Store keeps the outcomes. Required. Every node must share it (as the
	// Locker), or a repeat handled by another node runs again.
	Store claimstore.Outcomes
	// Retention is how long an outcome is kept, and so how long a key runs
	// once: a repeat after it runs again. Required, positive: there is no
	// default, since it is a promise to the senders.
	Retention time.Duration
	// Key returns a command's idempotency key. Default CommandUUID.
	Key KeyFunc
	// Namespace prefixes the lock and outcome namespace: a command's
	// records are keyed {Namespace + "." + command name, key}, so two
	// command types never share a key. With the command name it must fit
	// lockstore.MaxNamespaceLen. Default DefaultNamespace.
	Namespace string
	// Fingerprint identifies a command's payload. Default SHA256JSON,
	// which covers every field: a command carrying a value that differs
	// from send to send (a timestamp) needs a function that leaves it out,
	// or every repeat is a conflict.
	Fingerprint FingerprintFunc
	// LockTimeout bounds the wait of a command for the run of its key
	// ahead of it (a concurrent repeat); past it the command halts with a
	// timeout rejection, and the sender may try again. Default
	// Default 15 s.
	LockTimeout time.Duration
	// ReadFirst reads a command's stored outcome before taking its key's
	// lock: a later repeat is then answered by one read of the Store,
	// without a lock call, and a new key costs one more read (the read
	// under the lock stays, as a run may end between the two). Default
	// false: the lock first, for commands that mostly come once.
	ReadFirst bool
	// PurgeBatch is how many expired outcomes Purge deletes per call of
	// Store.PurgeOutcomes. Default 1000.
	PurgeBatch int
	// Logger logs what the after hooks cannot return, with the command's
	// id ("command_id") and the key ("key"): an outcome that could not be
	// stored (Error), a lock lost while the command ran (Error), a failed
	// release (Warn). Default slog.Default().
	Logger *slog.Logger
}

// validate reports every problem of the configuration at once.
func (c Config) validate() error {
	var errs []error
	if c.Locker == nil {
		errs = append(errs, errors.New("idempotency: Config.Locker is nil (give a lockstore store, such as lockstore.NewMemory)"))
	}
	if c.Store == nil {
		errs = append(errs, errors.New("idempotency: Config.Store is nil (give a claimstore store, such as claimstore.NewMemory)"))
	}
	if c.Retention <= 0 {
		errs = append(errs, fmt.Errorf("idempotency: Config.Retention is %v: it must be positive (how long a key runs once)", c.Retention))
	}
	if len(c.Namespace)+1 >= lockstore.MaxNamespaceLen {
		errs = append(errs, fmt.Errorf("idempotency: Config.Namespace is %d bytes: with a command name it must fit %d", len(c.Namespace), lockstore.MaxNamespaceLen))
	}
	if c.LockTimeout < 0 {
		errs = append(errs, fmt.Errorf("idempotency: Config.LockTimeout is negative (%v)", c.LockTimeout))
	}
	if c.PurgeBatch < 0 {
		errs = append(errs, fmt.Errorf("idempotency: Config.PurgeBatch is negative (%d)", c.PurgeBatch))
	}
	return errors.Join(errs...)
}
