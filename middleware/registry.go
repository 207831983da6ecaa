package middleware

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/ThreeDotsLabs/watermill/message"
)

// Registry maps command names, as a cqrs marshaler names them on the wire
// (metadata "name"), to command types, and decodes messages into fresh
// commands. It is safe for concurrent use; lookups take no lock.
type Registry struct {
	marshaler cqrs.CommandEventMarshaler

	mu    sync.Mutex // serializes writers
	types atomic.Pointer[map[string]reflect.Type]
}

// NewRegistry returns an empty registry naming and decoding commands with
// m. A nil m means cqrs.JSONMarshaler{}, which names a command by its
// package and type name, such as "commands.CreateStaff".
func NewRegistry(m cqrs.CommandEventMarshaler) *Registry {
	if m == nil {
		m = cqrs.JSONMarshaler{}
	}
	r := &Registry{marshaler: m}
	empty := map[string]reflect.Type{}
	r.types.Store(&empty)
	return r
}

// Register adds the command type C under the name the registry's marshaler
// gives a *C (as a cqrs.CommandProcessor names a handler's NewCommand), and
// returns that name. C must not be a pointer type. Registering a type again
// is a no-op; a name taken by another type fails.
func Register[C any](r *Registry) (string, error) {
	return r.addCommand(new(C))
}

// addCommand registers the type of cmd, a command or a pointer to one,
// under the name the marshaler gives a pointer to it, and returns that
// name (see Register).
func (r *Registry) addCommand(cmd any) (string, error) {
	t, err := commandType(cmd)
	if err != nil {
		return "", err
	}
	name := r.marshaler.Name(reflect.New(t).Interface())
	return name, r.add(name, t)
}

// AddName registers the type of cmd, a command or a pointer to one, under
// name, which need not be the marshaler's name for it: an alias keeps
// messages sent under a type's old name decodable after a rename.
func (r *Registry) AddName(name string, cmd any) error {
	t, err := commandType(cmd)
	if err != nil {
		return err
	}
	return r.add(name, t)
}

func (r *Registry) add(name string, t reflect.Type) error {
	if name == "" {
		return fmt.Errorf("middleware: command type %v has an empty name", t)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	old := *r.types.Load()
	if prev, ok := old[name]; ok {
		if prev == t {
			return nil
		}
		return fmt.Errorf("%w: %q names %v, not %v", errDuplicateCommand, name, prev, t)
	}
	next := maps.Clone(old)
	next[name] = t
	r.types.Store(&next)
	return nil
}

// commandType returns the struct (or other non-pointer) type of cmd.
func commandType(cmd any) (reflect.Type, error) {
	if cmd == nil {
		return nil, fmt.Errorf("middleware: nil command")
	}
	t := reflect.TypeOf(cmd)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() == reflect.Pointer {
		return nil, fmt.Errorf("middleware: command type %v is a pointer to a pointer", reflect.TypeOf(cmd))
	}
	return t, nil
}

// Names returns the registered names, sorted.
func (r *Registry) Names() []string {
	return slices.Sorted(maps.Keys(*r.types.Load()))
}

// New returns a fresh pointer to the command type registered under name,
// such as a *commands.CreateStaff, and whether there is one.
func (r *Registry) New(name string) (any, bool) {
	t, ok := (*r.types.Load())[name]
	if !ok {
		return nil, false
	}
	return reflect.New(t).Interface(), true
}

// Pipeline decodes msg into a fresh pointer of its registered type and
// returns the pipeline that carries the command through a Runner
// (Runner.Run): its command UUID is the message UUID, its correlation and
// causation ids come from the metadata (the correlation id is the message
// UUID when the metadata has none), its metadata is the message's, and its
// handler context starts as msg.Context(). It is what RouterMiddleware and
// the bus run for each message; an adapter of one's own, for a message
// loop that is no Watermill router, calls it too.
//
// It fails with ErrUnknownCommand when the name is missing or not
// registered, and with ErrUndecodable when the payload does not decode (or
// its decoder panics); either error is also an invalid rejection (matching
// ErrInvalid), whose message names the command and the message, ready to
// be the answer of a sender that waits. The rejection crosses the wire;
// ErrUnknownCommand, ErrUndecodable and the decoder's error stay on this
// node.
func (r *Registry) Pipeline(msg *message.Message) (*Pipeline, error) {
	name := r.marshaler.NameFromMessage(msg)
	cmd, ok := r.New(name)
	if !ok {
		return nil, invalidMessage(fmt.Errorf("%w %q (message %s)", ErrUnknownCommand, name, msg.UUID))
	}
	if err := r.unmarshal(msg, cmd); err != nil {
		return nil, invalidMessage(fmt.Errorf("%w %s (message %s): %w", ErrUndecodable, name, msg.UUID, err))
	}
	return newMessagePipeline(msg, cmd, name), nil
}

// unmarshal decodes msg into cmd. A command's decoder is user code: its
// panic is an error, so that the message is rejected as undecodable rather
// than nacked by a Recoverer and redelivered forever.
func (r *Registry) unmarshal(msg *message.Message, cmd any) error {
	var err error
	if perr := Recover("command decoder", func() { err = r.marshaler.Unmarshal(msg, cmd) }); perr != nil {
		return perr
	}
	return err
}
