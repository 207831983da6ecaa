-- The fencing-token sequence and the epoch tables (see epoch.go), as
-- releases before versioned migrations created them: IF NOT EXISTS adopts
-- a schema one of them made, keeping the sequence's value and the epoch.
-- Names are unqualified: run with search_path set to Config.Schema
-- (default claimbus).

-- +goose Up
-- A crash must not lose the schema once it is recorded, whatever the
-- server's synchronous_commit.
SET LOCAL synchronous_commit = on;
-- CACHE 1: a session caching values would hand out tokens out of order
-- across nodes.
CREATE SEQUENCE IF NOT EXISTS lock_token AS bigint MINVALUE 1 NO CYCLE CACHE 1;
CREATE TABLE IF NOT EXISTS lock_epoch (id int PRIMARY KEY CHECK (id = 1), epoch bigint NOT NULL);
INSERT INTO lock_epoch (id, epoch) VALUES (1, 0) ON CONFLICT (id) DO NOTHING;
CREATE UNLOGGED TABLE IF NOT EXISTS lock_epoch_live (id int PRIMARY KEY CHECK (id = 1), epoch bigint NOT NULL);

-- +goose Down
DROP TABLE IF EXISTS lock_epoch_live;
DROP TABLE IF EXISTS lock_epoch;
DROP SEQUENCE IF EXISTS lock_token;
