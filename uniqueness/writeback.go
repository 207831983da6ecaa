package uniqueness

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/claimbus/claimbus/middleware"
)

// WriteBack makes a rule write the value it claimed, normalised, back into
// the command before the handler runs, so that the handler stores exactly
// what was claimed and looked up:
//
//	uniqueness.Field(uniqueness.Names{Field: "email", Scope: "staff.email"},
//		func(c *commands.CreateStaff) string { return c.Email },
//		staffEmailTaken,
//		uniqueness.Normalize(uniqueness.NormalizeEmail),
//		uniqueness.WriteBack(func(c *commands.CreateStaff, v string) { c.Email = v }))
//
// BeforeDispatch calls f once all the command's claims are taken, only when
// the command goes on to its handler (never when it is halted), and never
// for a value that claims nothing (empty). C must be the rule's command
// type, and a pointer type: a rule for a non-pointer type cannot change the
// command, and Config.Validate refuses it with WriteBack.
func WriteBack[C any](f func(cmd C, value string)) Option {
	o := Option{writeBackType: reflect.TypeFor[C]()}
	if f != nil {
		o.writeBack = func(cmd any, value string) { f(cmd.(C), value) }
	}
	return o
}

// setWriteBack sets the rule's write-back from o, or reports why it cannot.
func (r *Rule) setWriteBack(o Option) error {
	switch {
	case o.writeBackType != r.cmdType:
		return fmt.Errorf("WriteBack is for %v, not %v", o.writeBackType, r.cmdType)
	case r.cmdType.Kind() != reflect.Pointer:
		return fmt.Errorf("WriteBack needs a pointer command type (*%v): a rule for %v gets a copy of the command and cannot change it", r.cmdType, r.cmdType)
	case o.writeBack == nil:
		return errors.New("nil WriteBack function")
	}
	r.writeBack = o.writeBack
	return nil
}

// writeBack writes the claimed values of the targets that have a
// write-back into p's command.
func writeBack(p *middleware.Pipeline, targets []target) {
	for _, t := range targets {
		if t.rule.writeBack != nil {
			t.rule.writeBack(p.Command, t.key.ID)
		}
	}
}
