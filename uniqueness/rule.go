package uniqueness

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/claimbus/claimbus/claimstore"
	"github.com/claimbus/claimbus/internal/lockext"
	"github.com/claimbus/claimbus/lockstore"
)

// valueLookup is a rule's lookup: whether value, normalised, is taken and,
// for a FieldSQL lookup with a second column, who took it.
type valueLookup func(ctx context.Context, value string) (lockext.Found, error)

// NormalizeEmail trims surrounding white space and lower-cases an email
// address, so that "  Ann@X.org" and "ann@x.org" claim the same value.
// Store addresses in this form too, so that the lookup finds them.
func NormalizeEmail(email string) string {
	return strings.ToLower(strings.TrimSpace(email))
}

// Rule says that one field of one command type is unique within a scope.
// Make one with Field.
type Rule struct {
	cmdType   reflect.Type
	field     string
	scope     string
	match     func(cmd any) (value string, ok bool)
	normalize func(value string) string
	taken     valueLookup
	// probe, set by FieldSQL, is the lookup as SQL (taken runs the same
	// SQL) for a lockext.Prober to run in the round trip that takes the
	// key.
	probe string
	done  func(ctx context.Context, cmd any, value string) (bool, error)
	// takenBy, set by TakenBy, is the command's own id, compared with who
	// took a value (the lookup's second column).
	takenBy   func(cmd any) string
	writeBack func(cmd any, value string)
	// reserve, when set, keeps a durable reservation of each value the
	// rule claims, for maxLag (see Reserve).
	reserve claimstore.Reservations
	maxLag  time.Duration
	err     error
}

// Option adds to a Rule made by Field or FieldSQL: Normalize, AlreadyDone
// or TakenBy, WriteBack or Reserve.
type Option struct {
	normalize     func(value string) string
	done          func(ctx context.Context, cmd any, value string) (bool, error)
	takenBy       func(cmd any) string
	doneType      reflect.Type // of AlreadyDone's or TakenBy's command
	doneName      string       // "AlreadyDone" or "TakenBy", for errors
	writeBack     func(cmd any, value string)
	writeBackType reflect.Type
	reserve       *reserveOption
}

// Normalize makes a rule claim and look up f(value) instead of the value
// as the command carries it, such as NormalizeEmail: the form that is
// unique, which the claim, the lookup and the handler's write must all
// use. Without it the value is used as it is.
func Normalize(f func(value string) string) Option { return Option{normalize: f} }

// AlreadyDone makes a rule recognise a redelivered command whose work
// already committed, for at-least-once delivery: when the value is taken,
// f reports whether cmd itself took it (for CreateStaff: the staff row
// with that email has cmd's StaffID), and when it does the command is done
// (halted with no error, its handler not run again) instead of rejected as
// already_taken. f must say true only for the command's own committed
// write. C must be the rule's command type.
func AlreadyDone[C any](f func(ctx context.Context, cmd C, value string) (bool, error)) Option {
	o := Option{doneType: reflect.TypeFor[C](), doneName: "AlreadyDone"}
	if f != nil {
		o.done = func(ctx context.Context, cmd any, value string) (bool, error) {
			return f(ctx, cmd.(C), value)
		}
	}
	return o
}

// TakenBy is AlreadyDone without a query of its own, for a FieldSQL rule
// whose lookup returns a second column of text naming who took each value:
//
//	uniqueness.FieldSQL(names, email, pool,
//		"SELECT email, staff_id FROM staff WHERE email = ANY($1)",
//		uniqueness.TakenBy(func(c *commands.CreateStaff) string { return c.StaffID }))
//
// A command whose value is taken by the id that id(cmd) returns took it
// itself, in an earlier committed run: it is done, as with AlreadyDone
// reporting true. The lookup that found the value taken tells who took
// it, in the lock's round trip where the store can run it there; a
// command that did not run the lookup itself (the claimant before it found
// the value taken) runs it once more. An empty id, or a NULL in the
// column, never matches. Give TakenBy or AlreadyDone, not both. C must be
// the rule's command type.
//
// The answer is the lookup's, so TakenBy suits a lookup that reads what
// the handler writes. Over a read model that lags (Reserve), a redelivery
// whose write the read model does not show yet finds the value held by a
// reservation, not by a row, and is rejected: there, use AlreadyDone and
// read the write side.
func TakenBy[C any](id func(C) string) Option {
	o := Option{doneType: reflect.TypeFor[C](), doneName: "TakenBy"}
	if id != nil {
		match := matchFunc(id) // a rule for a value type gets *C commands too
		o.takenBy = func(cmd any) string {
			s, _ := match(cmd)
			return s
		}
	}
	return o
}

// Names names a rule: the field, as rejections name it, and the scope its
// values are unique in. They are fields of a struct, not two adjacent
// arguments, so that they cannot be swapped without it showing:
//
//	uniqueness.Names{Field: "email", Scope: "staff.email"}
type Names struct {
	// Field names the field in rejections: use its name on the wire, such
	// as "email". The value is never put in a rejection. Required.
	Field string
	// Scope is the lock namespace of the values: rules naming the same
	// scope, for one command type or several (CreateStaff and
	// ChangeStaffEmail), compete for the same values. Required: a valid
	// lockstore.Key namespace.
	Scope string
}

// Field returns the rule that a field of commands of type C, named by
// names, is unique within names.Scope:
//
//	uniqueness.Field(uniqueness.Names{Field: "email", Scope: "staff.email"},
//		func(c *commands.CreateStaff) string { return c.Email },
//		staffEmailTaken, uniqueness.Normalize(uniqueness.NormalizeEmail))
//
// value reads the field; taken is the lookup: whether value, normalised,
// is taken, that is whether the store the handler writes to holds it now
// (see uniqueness/README.md for what it must read). An empty value (after normalising) claims nothing: reject it with
// validation.
//
// C is matched against the commands as the pipeline carries them, which
// are pointers (the bus and a middleware.Registry decode into a
// *commands.CreateStaff). A rule for a pointer type (*commands.CreateStaff)
// or an interface matches the commands of that type. A rule for a
// non-pointer type (commands.CreateStaff) matches both values of that type
// and non-nil pointers to them, which it dereferences; a nil pointer claims
// nothing. Such a rule cannot take WriteBack, which must change the
// command. Where the pipeline knows its commands (the bus at Start, a
// Registry given to middleware.RouterMiddleware), a rule whose C none of
// them has is an error matching middleware.ErrUnhandledCommandType.
//
// Mistakes in the arguments are reported by Config.Validate.
func Field[C any](names Names, value func(C) string, taken func(ctx context.Context, value string) (bool, error), opts ...Option) Rule {
	var errs []error
	if taken == nil {
		errs = append(errs, errors.New("nil lookup"))
		return newRule(names, value, nil, "", errs, opts)
	}
	return newRule(names, value, func(ctx context.Context, v string) (lockext.Found, error) {
		isTaken, err := taken(ctx, v)
		return lockext.Found{Taken: isTaken}, err
	}, "", errs, opts)
}

// FieldSQL is Field with the lookup written once, as SQL on db, the
// PostgreSQL database the handler writes to (a *pgxpool.Pool; R is then
// pgx.Rows, inferred, and uniqueness itself does not import pgx):
//
//	uniqueness.FieldSQL(uniqueness.Names{Field: "email", Scope: "staff.email"},
//		func(c *commands.CreateStaff) string { return c.Email },
//		pool, "SELECT email FROM staff WHERE email = ANY($1)",
//		uniqueness.Normalize(uniqueness.NormalizeEmail))
//
// lookup gets the normalised values as $1, a text array, and returns one
// row per value that is taken, with that value as its only column (with
// TakenBy, its first, beside who took it); a value is taken when a row
// names it. On a Locker that is a
// lockext.Prober (the PostgreSQL store, on the same database) an
// uncontended claim runs it in the round trip that takes the key, so one
// round trip serves the lock and the lookup (see lockext.Probe); a claim
// that waits for the key, and the re-check of a release, run it on db with
// $1 holding the one value, reading its rows the same way. Both answers
// come from the one statement, so they cannot disagree. Make it an index
// lookup whose generic plan uses the index: a probe shares a lock
// connection with other keys, and the store ends one that runs longer than
// half its round trip's time left (statement_timeout), failing that claim
// only.
func FieldSQL[C any, R interface {
	Next() bool
	Scan(dest ...any) error
	Close()
	Err() error
}](names Names, value func(C) string, db interface {
	Query(ctx context.Context, sql string, args ...any) (R, error)
}, lookup string, opts ...Option,
) Rule {
	var errs []error
	if db == nil {
		errs = append(errs, errors.New("nil database"))
	}
	if lookup == "" {
		errs = append(errs, errors.New("empty lookup SQL"))
	}
	// With TakenBy the lookup's rows have two columns.
	withBy := slices.ContainsFunc(opts, func(o Option) bool { return o.takenBy != nil })
	return newRule(names, value, func(ctx context.Context, v string) (lockext.Found, error) {
		rows, err := db.Query(ctx, lookup, []string{v})
		if err != nil {
			return lockext.Found{}, err
		}
		taken, err := lockext.ScanTaken(rows, withBy)
		if err != nil {
			return lockext.Found{}, err
		}
		by, ok := taken[v]
		return lockext.Found{Taken: ok, By: by}, nil
	}, lookup, errs, opts)
}

// newRule is the rule of Field and FieldSQL: taken is its lookup, probe
// the same lookup as SQL (or empty), errs the mistakes found so far.
func newRule[C any](names Names, value func(C) string, taken valueLookup, probe string, errs []error, opts []Option) Rule {
	field, scope := names.Field, names.Scope
	r := Rule{cmdType: reflect.TypeFor[C](), field: field, scope: scope, taken: taken, probe: probe}
	if field == "" {
		errs = append(errs, errors.New("empty field name"))
	}
	if err := (lockstore.Key{Namespace: scope, ID: "x"}).Validate(); err != nil {
		errs = append(errs, fmt.Errorf("scope %.40q is not a valid lock namespace: %w", scope, err))
	}
	if value == nil {
		errs = append(errs, errors.New("nil value function"))
	} else {
		r.match = matchFunc(value)
	}
	for _, o := range opts {
		switch {
		case o.reserve != nil:
			errs = append(errs, o.reserve.apply(&r)...)
		case o.normalize != nil:
			r.normalize = o.normalize
		case o.doneType != nil && o.doneType != r.cmdType:
			errs = append(errs, fmt.Errorf("%s is for %v, not %v", o.doneName, o.doneType, r.cmdType))
		case o.doneType != nil && o.done == nil && o.takenBy == nil:
			errs = append(errs, fmt.Errorf("nil %s function", o.doneName))
		case o.done != nil:
			r.done = o.done
		case o.takenBy != nil:
			r.takenBy = o.takenBy
		case o.writeBackType != nil:
			errs = append(errs, r.setWriteBack(o))
		default:
			errs = append(errs, errors.New("empty option (a nil function given to Normalize?)"))
		}
	}
	if r.takenBy != nil && r.done != nil {
		errs = append(errs, errors.New("both AlreadyDone and TakenBy: give one"))
	}
	if r.takenBy != nil && probe == "" {
		errs = append(errs, errors.New("TakenBy needs a FieldSQL rule with its lookup SQL, whose second column names who took the value"))
	}
	errs = slices.DeleteFunc(errs, func(err error) bool { return err == nil })
	if len(errs) > 0 {
		r.err = fmt.Errorf("uniqueness: rule for field %q of %v: %w", field, r.cmdType, errors.Join(errs...))
	}
	return r
}

// matchFunc returns the match function of a rule for C reading its field
// with value: it takes cmd when it is a C, or, when C is a non-pointer
// concrete type, a non-nil *C.
func matchFunc[C any](value func(C) string) func(cmd any) (string, bool) {
	if k := reflect.TypeFor[C]().Kind(); k == reflect.Pointer || k == reflect.Interface {
		return func(cmd any) (string, bool) {
			c, ok := cmd.(C)
			if !ok {
				return "", false
			}
			return value(c), true
		}
	}
	return func(cmd any) (string, bool) {
		switch c := cmd.(type) {
		case *C:
			if c == nil {
				return "", false
			}
			return value(*c), true
		case C:
			return value(c), true
		}
		return "", false
	}
}

// value returns the normalised value of the rule's field in cmd, and
// whether cmd is of the rule's type.
func (r *Rule) value(cmd any) (string, bool) {
	v, ok := r.match(cmd)
	if !ok {
		return "", false
	}
	if r.normalize != nil {
		v = r.normalize(v)
	}
	return v, true
}
