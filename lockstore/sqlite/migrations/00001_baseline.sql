-- The fencing tokens' high-water mark (see token.go), as releases before
-- versioned migrations created it: IF NOT EXISTS adopts a database one of
-- them made, mark and all. SQLite migrations must be idempotent: runs of
-- two processes may overlap (there is no advisory lock).

-- +goose Up
CREATE TABLE IF NOT EXISTS claimbus_token (id INTEGER PRIMARY KEY CHECK (id = 1), next INTEGER NOT NULL);

-- +goose Down
DROP TABLE IF EXISTS claimbus_token;
