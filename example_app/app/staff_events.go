package app

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/claimbus/claimbus/commands"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/middleware"
	"github.com/claimbus/claimbus/uniqueness"
)

// registerStaff handles CreateStaff in the events model: it appends the
// StaffRegistered event and publishes it to the projection once it has
// committed. The handler runs in the command's transaction (txcommand),
// which holds the email's lock, looked the email up, and commits the
// email's reservation and the Idempotency-Key's outcome with the event.
func (n *Node) registerStaff(ctx context.Context, c *commands.CreateStaff) (Staff, error) {
	s := newStaff(c)
	q := n.q(ctx)
	// The staff id is not claimed: one registered already is an ordinary
	// answer, as the staff table's primary key gives it in the table model.
	if taken, err := existsOn(ctx, q, `SELECT count(*) FROM staff_event WHERE staff_id = $1`, s.StaffID); err != nil {
		return Staff{}, err
	} else if taken {
		return Staff{}, middleware.Reject(middleware.CodeAlreadyTaken, "staff_id", "a member of staff has this id")
	}
	ev := &StaffRegistered{
		EventID: uuid.NewString(), StaffID: s.StaffID, Email: s.Email, Name: s.Name,
		CommandID: commandID(ctx), RecordedAt: time.Now().UTC(),
	}
	if _, err := q.exec(ctx,
		`INSERT INTO staff_event (event_id, staff_id, email, name, command_id, recorded_at) VALUES ($1, $2, $3, $4, $5, $6)`,
		ev.EventID, ev.StaffID, ev.Email, ev.Name, ev.CommandID, ev.RecordedAt.UnixNano()); err != nil {
		return Staff{}, err
	}
	// After the commit. A node that dies
	// before publishing leaves the event to the catch-up of the next start.
	lockstore.AfterCommit(ctx, func() {
		if err := n.projection.publish(context.WithoutCancel(ctx), ev); err != nil {
			n.log.WarnContext(ctx, "StaffRegistered not published: the catch-up of the next start applies it", "event_id", ev.EventID, "error", err)
		}
	})
	return s, nil
}

// project applies ev to the staff read model. The read model's unique index
// on email is the backstop: an event it refuses is a member the claims let
// through twice, counted in BackstopViolations, and left out of the read
// model (the events table keeps it).
func (n *Node) project(ctx context.Context, ev *StaffRegistered) error {
	_, err := n.db().exec(ctx,
		`INSERT INTO staff (staff_id, email, name) VALUES ($1, $2, $3)`, ev.StaffID, ev.Email, ev.Name)
	if err == nil || !n.backend.isUniqueViolation(err) {
		return err
	}
	var email string
	switch lerr := n.db().queryRow(ctx, `SELECT email FROM staff WHERE staff_id = $1`, ev.StaffID).Scan(&email); {
	case errors.Is(lerr, sql.ErrNoRows):
	case lerr != nil:
		return errors.Join(err, lerr)
	case email == ev.Email:
		// Applied already: by the catch-up of a node that started while
		// this event was on its way.
		return nil
	default:
		// Two sign-ups raced on one staff id (it is not claimed): the
		// first one projected wins.
		n.log.WarnContext(ctx, "projection: a StaffRegistered for a staff id already in the read model is left out", "event_id", ev.EventID)
		return nil
	}
	n.staffBackstops.Add(1)
	n.backstop(ctx, "staff.email (projection)", err)
	return nil
}

// catchUp applies to the read model, one at a time in the order they were
// appended (each once ProjectionLag has passed since), the StaffRegistered
// events that the read model does not show and did not refuse: those whose
// node stopped before projecting them (it was killed, or its database went
// away). A node runs it as it starts, so the read model catches up at the
// next start of any node. An event that another node is projecting now is
// applied once all the same: the second application finds it applied.
func (n *Node) catchUp(ctx context.Context) error {
	var at int64
	var id string
	for {
		ev := &StaffRegistered{}
		var recorded int64
		err := n.db().queryRow(ctx, `SELECT e.event_id, e.staff_id, e.email, e.name, e.command_id, e.recorded_at FROM staff_event e
	WHERE (e.recorded_at > $1 OR (e.recorded_at = $1 AND e.event_id > $2))
	AND NOT EXISTS (SELECT 1 FROM staff s WHERE s.staff_id = e.staff_id OR s.email = e.email)
	ORDER BY e.recorded_at, e.event_id LIMIT 1`, at, id).Scan(&ev.EventID, &ev.StaffID, &ev.Email, &ev.Name, &ev.CommandID, &recorded)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("app: catch up the projection: %w", err)
		}
		ev.RecordedAt = time.Unix(0, recorded).UTC()
		if err := n.projection.applyNow(ctx, ev); err != nil {
			return fmt.Errorf("app: catch up the projection: %w", err)
		}
		at, id = recorded, ev.EventID
	}
}

// registeredBy is the AlreadyDone of the events model: a StaffRegistered
// of c's staff id with the email is in the events table, which the
// handler writes (so, unlike the read model, it does not lag).
func (n *Node) registeredBy(ctx context.Context, c *commands.CreateStaff, email string) (bool, error) {
	return n.exists(ctx, `SELECT count(*) FROM staff_event WHERE email = $1 AND staff_id = $2`, email, c.StaffID)
}

// registered returns the member of staff id as its first StaffRegistered
// says, or an error matching ErrNotFound.
func (n *Node) registered(ctx context.Context, id string) (Staff, error) {
	s := Staff{StaffID: id}
	err := n.db().queryRow(ctx,
		`SELECT email, name FROM staff_event WHERE staff_id = $1 ORDER BY recorded_at, event_id LIMIT 1`, id).Scan(&s.Email, &s.Name)
	if errors.Is(err, sql.ErrNoRows) {
		return Staff{}, middleware.Reject(CodeNotFound, "staff_id", "no such member of staff")
	}
	return s, err
}

// StaffRegistrations returns how many StaffRegistered events the events
// table holds for email (normalised), or for every email when email is "".
func (n *Node) StaffRegistrations(ctx context.Context, email string) (int, error) {
	var count int
	var err error
	if email == "" {
		err = n.db().queryRow(ctx, `SELECT count(*) FROM staff_event`).Scan(&count)
	} else {
		err = n.db().queryRow(ctx, `SELECT count(*) FROM staff_event WHERE email = $1`, uniqueness.NormalizeEmail(email)).Scan(&count)
	}
	return count, err
}

// WaitProjected returns once every StaffRegistered this node published so
// far is applied to the read model (at once in the table model), or ctx's
// error.
func (n *Node) WaitProjected(ctx context.Context) error {
	if n.projection == nil {
		return nil
	}
	return n.projection.wait(ctx)
}
