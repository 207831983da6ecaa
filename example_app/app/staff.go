package app

import (
	"context"
	"database/sql"
	"errors"
	"strings"

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
	n.backstop(ctx, "staff.email", err)
	return Staff{}, middleware.Reject(middleware.CodeAlreadyTaken, "email", "a member of staff has this email")
}

// staffEmailTaken is the lookup of the email claims: it reads the table
// createStaff writes, in the same database, outside any transaction.
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
	var count int64
	if err := n.db().queryRow(ctx, query, args...).Scan(&count); err != nil {
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
