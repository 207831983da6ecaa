package middleware_test

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/middleware"
)

type typedCmd struct{ ID string }

func (typedCmd) Kind() string { return "typed" }

type otherCmd struct{ ID string }

// typer is a middleware acting on commands of the given types.
type typer struct {
	middleware.Hooks
	types []reflect.Type
}

func (t typer) CommandTypes() []middleware.CommandType {
	out := make([]middleware.CommandType, len(t.types))
	for i, ty := range t.types {
		out[i] = middleware.CommandType{Type: ty, By: fmt.Sprintf("rule %d", i)}
	}
	return out
}

func TestCommandTypeMatches(t *testing.T) {
	t.Parallel()
	ptr, val := reflect.TypeFor[*typedCmd](), reflect.TypeFor[typedCmd]()
	kinder := reflect.TypeFor[interface{ Kind() string }]()
	tests := []struct {
		name       string
		rule, cmd  reflect.Type
		wantsMatch bool
	}{
		{"pointer rule, pointer command", ptr, ptr, true},
		{"pointer rule, value command", ptr, val, false},
		{"value rule, pointer command", val, ptr, true},
		{"value rule, value command", val, val, true},
		{"interface rule, pointer command", kinder, ptr, true},
		{"other type", ptr, reflect.TypeFor[*otherCmd](), false},
		{"value rule, other pointer", val, reflect.TypeFor[*otherCmd](), false},
		{"nil rule type", nil, ptr, false},
		{"nil command type", ptr, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.wantsMatch, middleware.CommandType{Type: tt.rule}.Matches(tt.cmd))
		})
	}
}

func TestCheckCommandTypes(t *testing.T) {
	t.Parallel()
	carried := []reflect.Type{reflect.TypeFor[*typedCmd]()}
	mws := []middleware.Middleware{
		middleware.Hooks{}, // not a CommandTyper: ignored
		typer{types: []reflect.Type{reflect.TypeFor[typedCmd](), reflect.TypeFor[*otherCmd]()}},
		typer{types: []reflect.Type{reflect.TypeFor[otherCmd]()}},
	}
	err := middleware.CheckCommandTypes(mws, carried)
	require.ErrorIs(t, err, middleware.ErrUnhandledCommandType)
	require.NotContains(t, err.Error(), "typedCmd")
	require.Contains(t, err.Error(), "rule 1 acts on *middleware_test.otherCmd")
	require.Contains(t, err.Error(), "rule 0 acts on middleware_test.otherCmd")

	require.NoError(t, middleware.CheckCommandTypes(mws[:2], append(carried, reflect.TypeFor[*otherCmd]())))
	require.NoError(t, middleware.CheckCommandTypes(nil, nil))
}

func TestRouterConfigValidateChecksCommandTypes(t *testing.T) {
	t.Parallel()
	runner, err := middleware.NewRunner(middleware.RunnerConfig{Middleware: []middleware.Middleware{
		typer{types: []reflect.Type{reflect.TypeFor[typedCmd]()}},
	}})
	require.NoError(t, err)
	reg := middleware.NewRegistry(nil)
	err = middleware.RouterConfig{Runner: runner, Registry: reg}.Validate()
	require.ErrorIs(t, err, middleware.ErrUnhandledCommandType)
	_, err = middleware.Register[typedCmd](reg)
	require.NoError(t, err)
	require.NoError(t, middleware.RouterConfig{Runner: runner, Registry: reg}.Validate())
}
