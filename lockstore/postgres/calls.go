package postgres

import "sync"

// calls holds the state of Serialize and Exclusive that lives with the
// store. The zero value is ready.
type calls struct {
	sqlOnce sync.Once
	sql     serialSQL // see Store.serialSQL
}
