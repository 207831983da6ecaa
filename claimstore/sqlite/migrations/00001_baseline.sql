-- The reservation and outcome tables, as releases before versioned
-- migrations created them: IF NOT EXISTS adopts a database one of them
-- made, rows and all. IDs sort in byte order (SQLite's BINARY collation),
-- which List pages by. Times are Unix nanoseconds. SQLite migrations must
-- be idempotent: runs of two processes may overlap (there is no advisory
-- lock).

-- +goose Up
CREATE TABLE IF NOT EXISTS claimbus_reservation (
	namespace TEXT NOT NULL,
	id TEXT NOT NULL,
	owner TEXT NOT NULL,
	confirmed INTEGER NOT NULL,
	at INTEGER NOT NULL,
	PRIMARY KEY (namespace, id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS claimbus_outcome (
	namespace TEXT NOT NULL,
	id TEXT NOT NULL,
	fingerprint BLOB,
	result BLOB,
	err BLOB,
	expires INTEGER NOT NULL,
	PRIMARY KEY (namespace, id)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS claimbus_outcome_expires ON claimbus_outcome (expires);

-- +goose Down
DROP TABLE IF EXISTS claimbus_outcome;
DROP TABLE IF EXISTS claimbus_reservation;
