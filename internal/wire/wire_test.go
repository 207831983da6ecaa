package wire_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/wire"
	"github.com/claimbus/claimbus/middleware"
)

// A rejection anywhere in an error's chain crosses as the rejection alone:
// its cause stays here, and it still matches its code on the other side.
func TestRejectionCrossesWithoutItsCause(t *testing.T) {
	t.Parallel()
	cause := errors.New("dial tcp 10.1.2.3:5432: refused")
	rej := &middleware.Rejection{Code: "unavailable", Field: "id", Message: "try again"}
	err := fmt.Errorf("lock: %w", fmt.Errorf("%w: %w", rej, cause))

	back := wire.UnmarshalError(wire.MarshalError(err))
	// Equal compares the dynamic types too: users see middleware's type.
	require.Equal(t, rej, back)
	require.ErrorIs(t, back, &middleware.Rejection{Code: "unavailable"})
	require.NotErrorIs(t, back, &middleware.Rejection{Code: "locked"})
	require.NotContains(t, back.Error(), "10.1.2.3")
}

func TestOtherErrorsCrossAsTheirMessage(t *testing.T) {
	t.Parallel()
	back := wire.UnmarshalError(wire.MarshalError(errors.New("disk full")))
	var remote *middleware.RemoteError
	require.ErrorAs(t, back, &remote)
	require.Equal(t, "disk full", remote.Message)

	require.Nil(t, wire.MarshalError(nil))
	require.NoError(t, wire.UnmarshalError(nil))
	require.ErrorContains(t, wire.UnmarshalError([]byte("{")), "undecodable error in reply")
}

// A reply carries its error under MetadataError, and a reply of a replier
// that wrote the old requestreply key is still read.
func TestReplyErrorKeys(t *testing.T) {
	t.Parallel()
	errb := wire.MarshalError(&middleware.Rejection{Code: "locked"})

	msg := message.NewMessage("r1", nil)
	wire.SetReplyError(msg, errb)
	require.Equal(t, string(errb), msg.Metadata.Get("claimbus_error"))
	require.Equal(t, errb, wire.ReplyError(msg))

	old := message.NewMessage("r2", nil)
	old.Metadata.Set("_claimbus_error", string(errb))
	require.Equal(t, errb, wire.ReplyError(old))

	none := message.NewMessage("r3", nil)
	wire.SetReplyError(none, nil)
	require.Empty(t, none.Metadata)
	require.Nil(t, wire.ReplyError(none))
}
