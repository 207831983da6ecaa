package app

import (
	"errors"

	"github.com/claimbus/claimbus/middleware"
)

// Rejection codes of the example's own business rules, beside those of
// package middleware (already_taken, locked, invalid, unavailable,
// timeout). They cross the bus as *middleware.Rejection like those.
const (
	CodeNotFound          = "not_found"
	CodeNotOpen           = "not_open"
	CodeInsufficientFunds = "insufficient_funds"
)

// Sentinel rejections of the example, matched with errors.Is (by code).
var (
	// ErrNotFound: the wallet, transfer or lobby a command names does not
	// exist.
	ErrNotFound error = &middleware.Rejection{Code: CodeNotFound, Message: "not found"}
	// ErrNotOpen: the transfer was already approved or cancelled.
	ErrNotOpen error = &middleware.Rejection{Code: CodeNotOpen, Message: "transfer is not open"}
	// ErrInsufficientFunds: the wallet a transfer is from holds less than
	// its amount.
	ErrInsufficientFunds error = &middleware.Rejection{Code: CodeInsufficientFunds, Message: "insufficient funds"}
)

// ErrNilBackend is returned by New for a Config without a Backend.
var ErrNilBackend = errors.New("app: Config.Backend is nil (use SQLiteBackend or PostgresBackend)")
