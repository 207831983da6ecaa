package middleware

import (
	"errors"
	"fmt"
	"reflect"
)

// CommandType is a type of command a middleware acts on, as its
// CommandTyper reports it.
type CommandType struct {
	// Type is the type the middleware matches: a pointer type such as
	// *commands.CreateStaff, an interface, or a non-pointer type such as
	// commands.CreateStaff, which pointers to it match too (see Matches).
	Type reflect.Type
	// By names what acts on the type, for errors, such as
	// `uniqueness rule for field "email"`.
	By string
}

// Matches reports whether commands of type cmd, as a pipeline carries them
// (usually a pointer such as *commands.CreateStaff), are of type ct.Type:
// cmd is ct.Type or implements it, or cmd is a pointer to ct.Type.
func (ct CommandType) Matches(cmd reflect.Type) bool {
	if ct.Type == nil || cmd == nil {
		return false
	}
	return cmd.AssignableTo(ct.Type) || cmd.Kind() == reflect.Pointer && cmd.Elem() == ct.Type
}

// CommandTyper is implemented by a middleware that acts only on commands of
// certain types, such as the Uniqueness middleware, whose rules each name
// one. Where the pipeline's commands are known at construction (the bus at
// Start, a Registry given to RouterMiddleware), a type that none of them
// matches is an error matching ErrUnhandledCommandType: a middleware that
// would never act is a mistake (a rule written for the wrong type), not a
// no-op to allow silently.
type CommandTyper interface {
	// CommandTypes returns the command types the middleware acts on.
	CommandTypes() []CommandType
}

// CheckCommandTypes reports, with one error matching
// ErrUnhandledCommandType per type, each command type that a CommandTyper
// in mws names and that none of carried, the types of the commands the
// pipeline carries (such as *commands.CreateStaff), matches. It returns
// nil when every such type is carried.
func CheckCommandTypes(mws []Middleware, carried []reflect.Type) error {
	var errs []error
	for _, m := range mws {
		ct, ok := m.(CommandTyper)
		if !ok {
			continue
		}
		for _, t := range ct.CommandTypes() {
			if !matchesAny(t, carried) {
				errs = append(errs, fmt.Errorf("%w: %s acts on %v, which no command of the pipeline has",
					ErrUnhandledCommandType, t.By, t.Type))
			}
		}
	}
	return errors.Join(errs...)
}

func matchesAny(t CommandType, carried []reflect.Type) bool {
	for _, c := range carried {
		if t.Matches(c) {
			return true
		}
	}
	return false
}

// commandTypes returns the types of the commands the registry decodes:
// pointers to its registered types.
func (r *Registry) commandTypes() []reflect.Type {
	types := *r.types.Load()
	out := make([]reflect.Type, 0, len(types))
	for _, t := range types {
		out = append(out, reflect.PointerTo(t))
	}
	return out
}
