package middleware

// ReplyMarshaler is the replies' encoding, for the tests of the package's
// users' side.
type ReplyMarshaler[R any] = replyMarshaler[R]
