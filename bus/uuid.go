package bus

import (
	"crypto/rand"

	"github.com/google/uuid"
)

// newUUID returns a random (version 4) UUID, as uuid.NewString does, with
// one allocation (the string) where uuid.NewString takes two: its random
// bytes escape through the io.Reader it reads them from. Every message id
// of the default marshaler is one.
func newUUID() string {
	var u uuid.UUID
	// crypto/rand.Read never fails: it ends the program instead.
	_, _ = rand.Read(u[:])
	u[6] = (u[6] & 0x0f) | 0x40 // version 4
	u[8] = (u[8] & 0x3f) | 0x80 // RFC 4122 variant
	return u.String()
}
