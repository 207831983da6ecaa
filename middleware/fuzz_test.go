package middleware_test

import (
	"errors"
	"testing"
	"unicode/utf8"

	"github.com/claimbus/claimbus/internal/wire"

	"github.com/ThreeDotsLabs/watermill/components/requestreply"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/middleware"
)

// FuzzUnmarshalReply feeds reply messages from the outside to
// ReplyMarshaler: it never panics, and a reply it encoded comes back with
// the same rejection.
func FuzzUnmarshalReply(f *testing.F) {
	f.Add("1", `{"rejection":{"code":"locked","field":"id","message":"held"}}`, "held", []byte(`{"id":"s1"}`))
	f.Add("1", `{"message":"disk full"}`, "disk full", []byte(`null`))
	f.Add("1", `{`, "", []byte(`{}`))
	f.Add("0", "", "", []byte(`{"id":`))
	f.Add("1", `{"rejection":{"code":""}}`, "x", []byte(`""`))
	f.Fuzz(func(t *testing.T, hasErr, wireErr, plain string, payload []byte) {
		msg := message.NewMessage("r1", payload)
		msg.Metadata.Set(requestreply.HasErrorMetadataKey, hasErr)
		msg.Metadata.Set(wire.MetadataError, wireErr)
		msg.Metadata.Set(requestreply.ErrorMetadataKey, plain)
		m := middleware.ReplyMarshaler[StaffCreated]{}
		reply, err := m.UnmarshalReply(msg)
		if err != nil {
			return
		}
		if hasErr != "1" {
			require.NoError(t, reply.Error)
			return
		}
		require.Error(t, reply.Error)

		// Encode what was decoded: it comes back the same.
		again, err := m.MarshalReply(requestreply.BackendOnCommandProcessedParams[StaffCreated]{
			HandlerResult: reply.HandlerResult, HandleErr: reply.Error,
		})
		require.NoError(t, err)
		back, err := m.UnmarshalReply(again)
		require.NoError(t, err)
		require.Equal(t, reply.HandlerResult, back.HandlerResult)
		var rej *middleware.Rejection
		if errors.As(reply.Error, &rej) {
			require.ErrorIs(t, back.Error, rej)
			var backRej *middleware.Rejection
			require.ErrorAs(t, back.Error, &backRej)
			require.Equal(t, rej, backRej)
		} else if utf8.ValidString(reply.Error.Error()) {
			// JSON carries text as UTF-8: invalid bytes become U+FFFD.
			require.EqualError(t, back.Error, reply.Error.Error())
		}
	})
}

// FuzzRegistryPipeline decodes arbitrary payloads: a command or an error
// matching ErrUndecodable, never a panic.
func FuzzRegistryPipeline(f *testing.F) {
	f.Add([]byte(`{"email":"ann@x.org"}`))
	f.Add([]byte(`{"email":1}`))
	f.Add([]byte(``))
	reg := middleware.NewRegistry(nil)
	if _, err := middleware.Register[CreateStaff](reg); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		msg := message.NewMessage("m1", payload)
		msg.Metadata.Set("name", createStaffName)
		p, err := reg.Pipeline(msg)
		if err != nil {
			require.ErrorIs(t, err, middleware.ErrUndecodable)
			return
		}
		require.IsType(t, &CreateStaff{}, p.Command)
	})
}
