package storm

import "errors"

// ErrInterrupted is returned by Run, with the report of what was sent,
// when its context ends before the storm and its check are done.
var ErrInterrupted = errors.New("storm: interrupted")

// ErrUnhealthy is returned by Run, before anything is sent, when a target
// does not answer GET /healthz with 200 and status "ok".
var ErrUnhealthy = errors.New("storm: a target is not healthy")
