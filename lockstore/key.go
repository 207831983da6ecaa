package lockstore

import (
	"fmt"
	"unicode/utf8"
)

// Limits on the size of a Key, in bytes of UTF-8.
const (
	MaxNamespaceLen = 128
	MaxIDLen        = 512
)

// Key names one lockable resource: a namespace (a kind of resource, such as
// "staff.email" or "transfer") and an id within it.
type Key struct {
	Namespace string
	ID        string
}

// String returns "namespace/id".
func (k Key) String() string { return k.Namespace + "/" + k.ID }

// Validate reports, as an error matching ErrInvalidKey, a key whose namespace
// or id is empty, longer than its limit, or not valid UTF-8.
func (k Key) Validate() error {
	switch {
	case k.Namespace == "":
		return fmt.Errorf("%w: empty namespace (id %.40q)", ErrInvalidKey, k.ID)
	case k.ID == "":
		return fmt.Errorf("%w: empty id in namespace %.40q", ErrInvalidKey, k.Namespace)
	case len(k.Namespace) > MaxNamespaceLen:
		return fmt.Errorf("%w: namespace is %d bytes, the limit is %d", ErrInvalidKey, len(k.Namespace), MaxNamespaceLen)
	case len(k.ID) > MaxIDLen:
		return fmt.Errorf("%w: id is %d bytes, the limit is %d", ErrInvalidKey, len(k.ID), MaxIDLen)
	case !utf8.ValidString(k.Namespace) || !utf8.ValidString(k.ID):
		return fmt.Errorf("%w: not valid UTF-8", ErrInvalidKey)
	}
	return nil
}
