-- The reservation and outcome tables, as releases before versioned
-- migrations created them: IF NOT EXISTS adopts a schema one of them made,
-- rows and all. Names are unqualified: run with search_path set to
-- Config.Schema (default claimbus).
--
-- IDs and namespaces sort in byte order (COLLATE "C"), which List pages
-- by. Reservation pages keep a fifth free, so that Confirm's update of a
-- row fits beside it (a HOT update, which writes no index entry).

-- +goose Up
-- A crash must not lose the tables once they are recorded, whatever the
-- server's synchronous_commit.
SET LOCAL synchronous_commit = on;
CREATE TABLE IF NOT EXISTS claim_reservation (
	namespace text COLLATE "C" NOT NULL,
	id text COLLATE "C" NOT NULL,
	owner text NOT NULL,
	confirmed bool NOT NULL,
	at timestamptz NOT NULL,
	PRIMARY KEY (namespace, id)) WITH (fillfactor = 80);
CREATE TABLE IF NOT EXISTS claim_outcome (
	namespace text COLLATE "C" NOT NULL,
	id text COLLATE "C" NOT NULL,
	fingerprint bytea,
	result bytea,
	err bytea,
	expires timestamptz NOT NULL,
	PRIMARY KEY (namespace, id));
CREATE INDEX IF NOT EXISTS claim_outcome_expires ON claim_outcome (expires);

-- +goose Down
DROP TABLE IF EXISTS claim_outcome;
DROP TABLE IF EXISTS claim_reservation;
