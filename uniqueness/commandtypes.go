package uniqueness

import (
	"fmt"

	"github.com/claimbus/claimbus/middleware"
)

// CommandTypes returns the command type of each rule, naming the rule, so
// that the bus and middleware.RouterMiddleware refuse a rule whose type no
// command of the pipeline has (see middleware.CommandTyper). A rule for a
// non-pointer type C is reported as C, which commands of type *C match.
func (m *Middleware) CommandTypes() []middleware.CommandType {
	types := make([]middleware.CommandType, len(m.rules))
	for i, r := range m.rules {
		types[i] = middleware.CommandType{
			Type: r.cmdType,
			By:   fmt.Sprintf("uniqueness rule for field %q (scope %q)", r.field, r.scope),
		}
	}
	return types
}

var _ middleware.CommandTyper = (*Middleware)(nil)

// Stage places the middleware among the claims: after the idempotency
// middleware, whose repeats must not meet the claims of their first run.
func (m *Middleware) Stage() middleware.Stage { return middleware.StageClaim }
