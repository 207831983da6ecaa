package middleware_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/claimbus/claimbus/internal/wire"

	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/middleware"
)

// RenamedStaff stands for CreateStaff after a rename.
type RenamedStaff struct {
	Email string `json:"email"`
}

func TestRegistry(t *testing.T) {
	t.Parallel()
	reg := middleware.NewRegistry(nil)
	name, err := middleware.Register[CreateStaff](reg)
	require.NoError(t, err)
	require.Equal(t, createStaffName, name)

	again, err := middleware.Register[CreateStaff](reg)
	require.NoError(t, err, "registering a type again is a no-op")
	require.Equal(t, name, again)
	require.NoError(t, reg.AddName("staff.Create.v0", &RenamedStaff{}))

	err = reg.AddName(createStaffName, &RenamedStaff{})
	require.ErrorContains(t, err, "registered twice")
	require.ErrorContains(t, err, "RenamedStaff")

	_, err = middleware.Register[*CreateStaff](reg)
	require.ErrorContains(t, err, "pointer to a pointer")
	require.Error(t, reg.AddName("nil", nil))
	require.Error(t, reg.AddName("", &CreateStaff{}))

	require.Equal(t, []string{createStaffName, "staff.Create.v0"}, reg.Names())

	cmd, ok := reg.New(createStaffName)
	require.True(t, ok)
	require.Equal(t, &CreateStaff{}, cmd)
	_, ok = reg.New("nope")
	require.False(t, ok)

	t.Run("decode", func(t *testing.T) {
		t.Parallel()
		msg := commandMessage(t, &CreateStaff{Email: "ann@x.org"})
		p, err := reg.Pipeline(msg)
		require.NoError(t, err)
		require.Equal(t, createStaffName, p.CommandName)
		require.Equal(t, &CreateStaff{Email: "ann@x.org"}, p.Command)

		alias := commandMessage(t, &CreateStaff{Email: "old@x.org"})
		alias.Metadata.Set("name", "staff.Create.v0")
		p, err = reg.Pipeline(alias)
		require.NoError(t, err)
		require.Equal(t, &RenamedStaff{Email: "old@x.org"}, p.Command)
	})
	t.Run("unknown and missing names", func(t *testing.T) {
		t.Parallel()
		_, err := reg.Pipeline(message.NewMessage("m1", []byte("{}")))
		require.ErrorIs(t, err, middleware.ErrUnknownCommand)
		require.ErrorContains(t, err, "m1")
		msg := message.NewMessage("m2", []byte("{}"))
		msg.Metadata.Set("name", "billing.Refund")
		_, err = reg.Pipeline(msg)
		require.ErrorIs(t, err, middleware.ErrUnknownCommand)
		require.ErrorContains(t, err, "billing.Refund")
	})
	t.Run("pipeline", func(t *testing.T) {
		t.Parallel()
		msg := commandMessage(t, &CreateStaff{Email: "ann@x.org"})
		msg.Metadata.Set(wire.MetadataCausationID, "cause-1")
		p, err := reg.Pipeline(msg)
		require.NoError(t, err)
		require.Equal(t, &CreateStaff{Email: "ann@x.org"}, p.Command)
		require.Equal(t, createStaffName, p.CommandName)
		require.Equal(t, msg.UUID, p.CommandUUID)
		require.Equal(t, msg.UUID, p.CorrelationID, "no correlation id: the message's UUID")
		require.Equal(t, "cause-1", p.CausationID)
		require.Equal(t, msg.Context(), p.Context())

		msg.Metadata.Set(wire.MetadataCorrelationID, "flow-1")
		p, err = reg.Pipeline(msg)
		require.NoError(t, err)
		require.Equal(t, "flow-1", p.CorrelationID)

		_, err = reg.Pipeline(message.NewMessage("m9", []byte("{}")))
		require.ErrorIs(t, err, middleware.ErrUnknownCommand)
	})
	t.Run("decode errors are invalid rejections", func(t *testing.T) {
		t.Parallel()
		_, err := reg.Pipeline(message.NewMessage("m7", []byte("{}")))
		require.ErrorIs(t, err, middleware.ErrInvalid)
		var rej *middleware.Rejection
		require.ErrorAs(t, err, &rej)
		require.Equal(t, `middleware: unknown command "" (message m7)`, rej.Message)

		msg := commandMessage(t, &CreateStaff{})
		msg.Payload = []byte(`{`)
		_, err = reg.Pipeline(msg)
		require.ErrorIs(t, err, middleware.ErrInvalid)
		require.ErrorIs(t, err, middleware.ErrUndecodable)
		require.ErrorAs(t, err, &rej)
		require.Contains(t, rej.Message, "middleware: undecodable command "+createStaffName)
	})
	t.Run("undecodable payload", func(t *testing.T) {
		t.Parallel()
		msg := commandMessage(t, &CreateStaff{})
		msg.Payload = []byte(`{"email": ["a"]}`)
		_, err := reg.Pipeline(msg)
		require.ErrorIs(t, err, middleware.ErrUndecodable)
		require.ErrorContains(t, err, createStaffName)
		require.ErrorContains(t, err, msg.UUID)
	})
	t.Run("a decoder that panics", func(t *testing.T) {
		t.Parallel()
		reg := middleware.NewRegistry(nil)
		name, err := middleware.Register[panicky](reg)
		require.NoError(t, err)
		msg := message.NewMessage("m3", []byte("{}"))
		msg.Metadata.Set("name", name)
		p, err := reg.Pipeline(msg)
		require.Nil(t, p)
		require.ErrorIs(t, err, middleware.ErrUndecodable)
		require.ErrorContains(t, err, "decoder boom")
		var perr *middleware.PanicError
		require.ErrorAs(t, err, &perr)
		require.Equal(t, "command decoder", perr.Where)
		require.NotEmpty(t, perr.Stack)
	})
}

// panicky's decoder panics on every payload.
type panicky struct{}

func (*panicky) UnmarshalJSON([]byte) error { panic("decoder boom") }

func TestRegistryUsesTheMarshalersNames(t *testing.T) {
	t.Parallel()
	m := cqrs.JSONMarshaler{GenerateName: cqrs.StructName}
	reg := middleware.NewRegistry(m)
	name, err := middleware.Register[CreateStaff](reg)
	require.NoError(t, err)
	require.Equal(t, "CreateStaff", name)
	msg, err := m.Marshal(&CreateStaff{Email: "ann@x.org"})
	require.NoError(t, err)
	p, err := reg.Pipeline(msg)
	require.NoError(t, err)
	require.Equal(t, "CreateStaff", p.CommandName)
	require.Equal(t, &CreateStaff{Email: "ann@x.org"}, p.Command)
}

// TestRegistryConcurrent adds names while other goroutines decode.
func TestRegistryConcurrent(t *testing.T) {
	t.Parallel()
	reg := newRegistry(t)
	msg := commandMessage(t, &CreateStaff{Email: "ann@x.org"})
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				if err := reg.AddName(fmt.Sprintf("alias.%d.%d", g, i), &CreateStaff{}); err != nil {
					errs <- err
					return
				}
				if _, err := reg.Pipeline(msg); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, reg.Names(), 801)
}
