package middleware

// ReplyMarshaler is the replies' encoding, for the tests of the package's
// users' side.
type ReplyMarshaler[R any] = replyMarshaler[R]

// Handled reports whether the handler ran and returned, with or without an
// error: false when a hook halted or panicked, the context was done
// before the handler, or the handler panicked.
func Handled(p *Pipeline) bool { return p.handled }
