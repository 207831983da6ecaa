package app

import (
	"context"
	"database/sql"
	"errors"
	"strings"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/commands"
	"github.com/claimbus/claimbus/middleware"
	"github.com/claimbus/claimbus/uniqueness"
)

// Staff is a member of staff as stored: the email normalised (trimmed,
// lower case).
type Staff struct {
	StaffID string `json:"staff_id"`
	Email   string `json:"email"`
	Name    string `json:"name"`
}

func newStaff(c *commands.CreateStaff) Staff {
	return Staff{StaffID: c.StaffID, Email: uniqueness.NormalizeEmail(c.Email), Name: strings.TrimSpace(c.Name)}
}

// createStaff handles CreateStaff. By the time it runs, the Uniqueness
// middleware holds the claim on the normalised email and its lookup found
// no member with it, so the insert is the only one for that email on any
// node. The insert commits on its own, before the handler returns and so
// before the claim is released: the next claimant's lookup sees the row.
func (n *Node) createStaff(ctx context.Context, c *commands.CreateStaff) (Staff, error) {
	s := newStaff(c)
	_, err := n.db().exec(ctx,
		`INSERT INTO staff (staff_id, email, name) VALUES ($1, $2, $3)`, s.StaffID, s.Email, s.Name)
	if err == nil {
		return s, nil
	}
	if !n.backend.isUniqueViolation(err) {
		return Staff{}, err
	}
	// The staff id is not claimed: a taken one is an ordinary answer.
	if taken, lerr := n.exists(ctx, `SELECT count(*) FROM staff WHERE staff_id = $1`, s.StaffID); lerr != nil {
		return Staff{}, errors.Join(err, lerr)
	} else if taken {
		return Staff{}, middleware.Reject(middleware.CodeAlreadyTaken, "staff_id", "a member of staff has this id")
	}
	// The email's unique index fired: something bypassed the claims.
	n.staffBackstops.Add(1)
	n.backstop(ctx, "staff.email", err)
	return Staff{}, middleware.Reject(middleware.CodeAlreadyTaken, "email", "a member of staff has this email")
}

// signUp sends c through the bus and returns the member, and whether this
// command created it. A command the Uniqueness middleware found done (the
// member with its address has its staff id: see staffEmailRule) is a
// replay, or a redelivery, of the sign-up that created the member: it
// gets the member as stored, and created is false. A replay whose name
// differs from the one stored is rejected as conflicting_replay and
// changes nothing.
func (n *Node) signUp(ctx context.Context, c *commands.CreateStaff) (s Staff, created bool, err error) {
	s, err = bus.Dispatch[Staff](ctx, n.bus, c)
	if err != nil || s.StaffID != "" {
		return s, err == nil, err
	}
	stored, err := n.storedStaff(ctx, c.StaffID)
	if err != nil {
		return Staff{}, false, err
	}
	if stored != newStaff(c) {
		return Staff{}, false, middleware.Reject(CodeConflictingReplay, "name",
			"a member of staff was created with this staff_id and email and another name: send the same fields again, or use another staff_id")
	}
	return stored, false, nil
}

// storedStaff returns the member of staff id as the handler stored it: from
// the staff table in the table model, from the events table in the events
// model (the read model may not show it yet).
func (n *Node) storedStaff(ctx context.Context, id string) (Staff, error) {
	if n.model == StaffEvents {
		return n.registered(ctx, id)
	}
	return n.Staff(ctx, id)
}

// Staff returns the member of staff id, or an error matching ErrNotFound.
// In the events model it reads the read model, which shows a sign-up
// Config.ProjectionLag (and a little more) after it was answered.
func (n *Node) Staff(ctx context.Context, id string) (Staff, error) {
	s := Staff{StaffID: id}
	err := n.db().queryRow(ctx, `SELECT email, name FROM staff WHERE staff_id = $1`, id).Scan(&s.Email, &s.Name)
	if errors.Is(err, sql.ErrNoRows) {
		return Staff{}, middleware.Reject(CodeNotFound, "staff_id", "no such member of staff")
	}
	return s, err
}

// StaffByEmail returns the members of staff whose address is email once
// normalised (uniqueness.NormalizeEmail): one at most, none as an empty,
// non-nil slice.
func (n *Node) StaffByEmail(ctx context.Context, email string) ([]Staff, error) {
	s := Staff{Email: uniqueness.NormalizeEmail(email)}
	err := n.db().queryRow(ctx, `SELECT staff_id, name FROM staff WHERE email = $1`, s.Email).Scan(&s.StaffID, &s.Name)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return []Staff{}, nil
	case err != nil:
		return nil, err
	}
	return []Staff{s}, nil
}

// staffEmailRule is the rule that staff emails are unique. Its lookup
// reads the staff table, outside any transaction. In the table model that
// is the table createStaff writes, in the same database; in the events
// model it is the read model, which lags behind the events registerStaff
// appends (the reservations cover the lag). On PostgreSQL the lookup is
// written once, as SQL (uniqueness.FieldSQL), which the lock store also
// runs in the claim's lock round trip; on SQLite, whose store cannot,
// staffEmailTaken is the lookup.
//
// A sign-up whose email its own earlier run took is done, not rejected
// (a replay or a redelivery): in the table model on PostgreSQL the lookup
// returns the staff id beside the email (uniqueness.TakenBy), so the
// claim's round trip answers that too; on SQLite staffCreatedBy asks; in
// the events model registeredBy reads the events, which the read model
// lags behind.
func (n *Node) staffEmailRule() uniqueness.Rule {
	names := uniqueness.Names{Field: "email", Scope: NamespaceStaffEmail}
	email := func(c *commands.CreateStaff) string { return c.Email }
	normalize := uniqueness.Normalize(uniqueness.NormalizeEmail)
	pg, onPG := n.backend.(pgBackend)
	switch {
	case onPG && n.model == StaffEvents:
		return uniqueness.FieldSQL(names, email, pg.store.Pool(), `SELECT email FROM staff WHERE email = ANY($1)`,
			normalize, uniqueness.AlreadyDone(n.registeredBy))
	case onPG:
		return uniqueness.FieldSQL(names, email, pg.store.Pool(), `SELECT email, staff_id FROM staff WHERE email = ANY($1)`,
			normalize, uniqueness.TakenBy(func(c *commands.CreateStaff) string { return c.StaffID }))
	case n.model == StaffEvents:
		return uniqueness.Field(names, email, n.staffEmailTaken, normalize, uniqueness.AlreadyDone(n.registeredBy))
	}
	return uniqueness.Field(names, email, n.staffEmailTaken, normalize, uniqueness.AlreadyDone(n.staffCreatedBy))
}

// staffEmailTaken is the email rule's lookup on SQLite.
func (n *Node) staffEmailTaken(ctx context.Context, email string) (bool, error) {
	return n.exists(ctx, `SELECT count(*) FROM staff WHERE email = $1`, email)
}

// staffCreatedBy recognises a redelivered CreateStaff whose first run
// committed: the member with the email is the one it creates.
func (n *Node) staffCreatedBy(ctx context.Context, c *commands.CreateStaff, email string) (bool, error) {
	var id string
	err := n.db().queryRow(ctx, `SELECT staff_id FROM staff WHERE email = $1`, email).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil && id == c.StaffID, err
}

// exists runs a count query and reports whether it counted anything.
func (n *Node) exists(ctx context.Context, query string, args ...any) (bool, error) {
	return existsOn(ctx, n.db(), query, args...)
}

// existsOn is exists on q.
func existsOn(ctx context.Context, q querier, query string, args ...any) (bool, error) {
	var count int64
	if err := q.queryRow(ctx, query, args...).Scan(&count); err != nil {
		return false, err
	}
	return count > 0, nil
}

// StaffCount returns how many members of staff there are.
func (n *Node) StaffCount(ctx context.Context) (int, error) {
	var count int
	err := n.db().queryRow(ctx, `SELECT count(*) FROM staff`).Scan(&count)
	return count, err
}
