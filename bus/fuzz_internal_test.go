package bus

import (
	"context"
	"errors"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/claimbus/claimbus/internal/wire"
	"github.com/claimbus/claimbus/middleware"
)

type fuzzCmd struct {
	N    int
	Text string
}

type fuzzResult struct {
	N    int
	Text string
}

// FuzzProcess feeds arbitrary command messages, as a transport could
// deliver them, to the handling side: never a panic, and a message that
// cannot be handled is an invalid rejection.
func FuzzProcess(f *testing.F) {
	f.Add("bus.fuzzCmd", []byte(`{"N":1,"Text":"a"}`))
	f.Add("bus.fuzzCmd", []byte(`not json`))
	f.Add("", []byte(`{}`))
	f.Add("other.Cmd", []byte(`{"N":"x"}`))
	f.Add("bus.fuzzCmd", []byte(`{"N":1e400}`))
	b, err := New(Config{})
	if err != nil {
		f.Fatal(err)
	}
	if err := Handle(b, func(_ context.Context, c *fuzzCmd) (fuzzResult, error) {
		if c.N < 0 {
			return fuzzResult{}, middleware.Reject(middleware.CodeInvalid, "N", "negative")
		}
		return fuzzResult(*c), nil
	}); err != nil {
		f.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = b.Close() })

	f.Fuzz(func(t *testing.T, name string, payload []byte) {
		msg := message.NewMessage("00000000-0000-0000-0000-000000000001", payload)
		msg.Metadata.Set(wire.MetadataCommandName, name)
		r, poison := b.process(msg, nil)
		res, err := decodeReply[fuzzResult](r, msg.UUID, name)
		switch {
		case poison != "":
			if !errors.Is(err, middleware.ErrInvalid) {
				t.Fatalf("poison %q answered with %v", poison, err)
			}
		case err == nil && len(r.result) == 0:
			t.Fatalf("no result and no error for %q %q", name, payload)
		case err != nil && res != (fuzzResult{}):
			t.Fatalf("an error with a non-zero result: %v %+v", err, res)
		}
	})
}

// FuzzDecodeReply feeds arbitrary replies to the sending side: never a
// panic, and an encoded error is always an error.
func FuzzDecodeReply(f *testing.F) {
	f.Add([]byte(`{"N":1}`), []byte(nil))
	f.Add([]byte(nil), wire.MarshalError(middleware.ErrAlreadyTaken))
	f.Add([]byte(`[`), []byte(`{"message":"x"}`))
	f.Add([]byte(`null`), []byte(`{`))
	f.Fuzz(func(t *testing.T, result, errb []byte) {
		res, err := decodeReply[fuzzResult](reply{result: result, errb: errb}, "id", "name")
		if len(errb) > 0 && err == nil {
			t.Fatalf("error %q decoded as nil", errb)
		}
		if err != nil && res != (fuzzResult{}) {
			t.Fatalf("an error with a non-zero result: %v %+v", err, res)
		}
	})
}
