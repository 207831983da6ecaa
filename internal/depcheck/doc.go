// Package depcheck holds no code, only a test that keeps heavy
// dependencies (pgx, SQLite, watermill-sql, NATS and watermill-nats,
// OpenTelemetry) out of the packages that must stay light: importing
// lockstore, claimstore (and its conformance suite), middleware, uniqueness,
// idempotency, bus, commands or observe must not compile them.
package depcheck
