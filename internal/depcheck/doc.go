// Package depcheck holds no code, only tests of the module's imports:
//
//   - the layering: layers_test.go holds the module's one-way dependencies as a
//     table, a row per package of the module listing the packages of the
//     module its non-test files may import and why; an import its row does
//     not allow, or a package without a row, fails the test with the
//     package, the import and the rule. Test files are not held to it: a
//     layer's tests drive it through the layers above, and no user
//     compiles them.
//   - the heavy dependencies: pgx, SQLite, watermill-sql, NATS and
//     watermill-nats, OpenTelemetry stay out of the packages that must stay
//     light: importing lockstore, claimstore (and its conformance suite),
//     middleware, uniqueness, idempotency, bus, commands or observe must not
//     compile them.
package depcheck
