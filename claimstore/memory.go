package claimstore

import (
	"bytes"
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/claimbus/claimbus/claimstore/internal/claimcheck"
	"github.com/claimbus/claimbus/lockstore"
)

// MemoryConfig configures a memory store. The zero value is ready to use.
type MemoryConfig struct {
	// Now is the store's clock, for reservation ages and retention.
	// Default: time.Now. Tests inject a clock they move by hand.
	Now func() time.Time
}

// memory is the Store of NewMemory.
type memory struct {
	now func() time.Time

	mu           sync.Mutex
	reservations map[lockstore.Key]*memReservation
	outcomes     map[lockstore.Key]*memOutcome
}

type memReservation struct {
	owner     string
	confirmed bool
	at        time.Time
}

type memOutcome struct {
	o       Outcome
	expires time.Time
}

// NewMemory returns an empty Store in the memory of one process: for
// tests, and for a single process whose reservations need not survive it.
// It is safe for concurrent use.
func NewMemory(cfg MemoryConfig) Store {
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	return &memory{
		now:          now,
		reservations: make(map[lockstore.Key]*memReservation),
		outcomes:     make(map[lockstore.Key]*memOutcome),
	}
}

// Reserve implements Reservations.
func (m *memory) Reserve(ctx context.Context, key lockstore.Key, owner string, maxLag time.Duration) (Reservation, bool, error) {
	if err := claimcheck.Reserve(ctx, key, owner, maxLag); err != nil {
		return Reservation{}, false, err
	}
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.reservations[key]
	switch {
	case r != nil && r.owner == owner:
		// The owner's own earlier reservation: kept, confirmed or not, its
		// age restarted.
		r.at = now
		return Reservation{Key: key, Owner: owner, Confirmed: r.confirmed}, true, nil
	case r != nil && (r.confirmed || now.Sub(r.at) < maxLag):
		return r.reservation(key, now), false, nil
	}
	m.reservations[key] = &memReservation{owner: owner, at: now}
	return Reservation{}, true, nil
}

// Confirm implements Reservations.
func (m *memory) Confirm(ctx context.Context, key lockstore.Key, owner string) error {
	if err := claimcheck.Owned(ctx, key, owner); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.reservations[key]
	if r == nil || r.owner != owner {
		return claimcheck.NotReserved(key, owner)
	}
	r.confirmed, r.at = true, m.now()
	return nil
}

// Cancel implements Reservations.
func (m *memory) Cancel(ctx context.Context, key lockstore.Key, owner string) error {
	if err := claimcheck.Owned(ctx, key, owner); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if r := m.reservations[key]; r != nil && r.owner == owner && !r.confirmed {
		delete(m.reservations, key)
	}
	return nil
}

// Drop implements Reservations.
func (m *memory) Drop(ctx context.Context, key lockstore.Key) error {
	if err := claimcheck.Key(ctx, key); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.reservations, key)
	return nil
}

// List implements Reservations.
func (m *memory) List(ctx context.Context, namespace, after string, limit int) ([]Reservation, error) {
	if err := claimcheck.List(ctx, namespace, limit); err != nil {
		return nil, err
	}
	now := m.now()
	m.mu.Lock()
	var out []Reservation
	for k, r := range m.reservations {
		if k.Namespace == namespace && k.ID > after {
			out = append(out, r.reservation(k, now))
		}
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b Reservation) int { return cmp.Compare(a.Key.ID, b.Key.ID) })
	return out[:min(len(out), limit)], nil
}

func (r *memReservation) reservation(key lockstore.Key, now time.Time) Reservation {
	return Reservation{Key: key, Owner: r.owner, Confirmed: r.confirmed, Age: max(now.Sub(r.at), 0)}
}

// Outcome implements Outcomes.
func (m *memory) Outcome(ctx context.Context, key lockstore.Key) (Outcome, bool, error) {
	if err := claimcheck.Key(ctx, key); err != nil {
		return Outcome{}, false, err
	}
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.outcomes[key]
	if o == nil || !now.Before(o.expires) {
		return Outcome{}, false, nil
	}
	return o.o.clone(), true, nil
}

// SaveOutcome implements Outcomes.
func (m *memory) SaveOutcome(ctx context.Context, key lockstore.Key, o Outcome, retention time.Duration) error {
	if err := claimcheck.Save(ctx, key, retention); err != nil {
		return err
	}
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.outcomes[key] = &memOutcome{o: o.clone(), expires: now.Add(retention)}
	return nil
}

// PurgeOutcomes implements Outcomes.
func (m *memory) PurgeOutcomes(ctx context.Context, limit int) (int, error) {
	if err := claimcheck.Purge(ctx, limit); err != nil {
		return 0, err
	}
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for k, o := range m.outcomes {
		if n == limit {
			break
		}
		if !now.Before(o.expires) {
			delete(m.outcomes, k)
			n++
		}
	}
	return n, nil
}

func (o Outcome) clone() Outcome {
	return Outcome{Fingerprint: bytes.Clone(o.Fingerprint), Result: bytes.Clone(o.Result), Err: bytes.Clone(o.Err)}
}
