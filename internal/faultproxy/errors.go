package faultproxy

import "errors"

// ErrClosed is returned by Await when the proxy is closed before its
// condition holds.
var ErrClosed = errors.New("faultproxy: proxy closed")
