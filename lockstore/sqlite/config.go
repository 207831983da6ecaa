package sqlite

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/claimbus/claimbus/lockstore"
)

// Config configures a Store. The zero value is ready to use.
type Config struct {
	// Locks configures the in-process lock engine the store's locks come
	// from (lease TTL, clock, node name, shards; see
	// lockstore.MemoryConfig). Default: the zero MemoryConfig, locks without
	// leases.
	Locks lockstore.MemoryConfig

	// LockDir is the directory of the lock file named by the database
	// file's identity, "claimbus-sqlite-<device>-<inode>.lock", which keeps
	// out a Store of another process that opened the same file by another
	// name (see docs/lockstore.md). Every process that may open
	// the database must use the same one: an absolute path to a directory
	// that exists, that all of them may create files in, and that nothing
	// cleans while a store runs. Point it elsewhere where /tmp is private
	// to a service (systemd's PrivateTmp) or aged by a cleaner. Default:
	// "/tmp" (a fixed path rather than os.TempDir, since $TMPDIR can differ
	// from one process to the next).
	LockDir string

	// NoAutoMigrate, when true, stops New from creating tables or applying
	// migrations: New checks that the database is at the version this
	// release needs and fails with an error matching ErrSchemaOutdated when
	// it is not (run Migrate, or goose on Migrations, first). Default false:
	// New applies pending migrations.
	NoAutoMigrate bool
}

// defaultLockDir is the LockDir a zero Config uses.
const defaultLockDir = "/tmp"

// validate reports every problem of the config at once.
func (c Config) validate() error {
	var errs []error
	if err := c.Locks.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("sqlite: Config.Locks: %w", err))
	}
	if c.LockDir != "" && !filepath.IsAbs(c.LockDir) {
		errs = append(errs, fmt.Errorf("sqlite: Config.LockDir %q is not an absolute path: "+
			"every process must find the same directory, whatever its working directory", c.LockDir))
	}
	return errors.Join(errs...)
}

// defaultBusyTimeout is the busy timeout DSN uses when given 0.
const defaultBusyTimeout = 5 * time.Second

// LockFileSuffix is appended to the database file's path to name one of
// the files a Store locks (flock) for as long as it is open; the other is
// named by the file's identity (see docs/lockstore.md).
const LockFileSuffix = ".claimbus.lock"

// DSN returns a modernc.org/sqlite connection string for the database file
// at path that suits a Store:
//
//   - _txlock=immediate: every transaction begins with BEGIN IMMEDIATE,
//     taking the write lock at once, so that a read-modify-write never
//     fails halfway with SQLITE_BUSY when it comes to write (and
//     Serialize's wait for the lock obeys the busy timeout);
//   - _busy_timeout: how long a statement waits for a lock another
//     connection holds before it fails with SQLITE_BUSY (busyTimeout,
//     rounded down to milliseconds; 0 means 5s). The writes of the Store
//     and of claimstore/sqlite on one *sql.DB, and Begin's, take turns
//     in Go at its write gate instead (see Serialize): the busy timeout
//     bounds the wait for the other writers, of another handle or
//     process;
//   - _journal_mode=WAL: readers do not block the writer, nor it them.
//
// Open it with database/sql; the package registers the driver as "sqlite":
//
//	db, err := sql.Open("sqlite", sqlite.DSN("app.db", 0))
func DSN(path string, busyTimeout time.Duration) string {
	if busyTimeout <= 0 {
		busyTimeout = defaultBusyTimeout
	}
	q := url.Values{}
	q.Set("_txlock", "immediate")
	q.Set("_busy_timeout", strconv.FormatInt(busyTimeout.Milliseconds(), 10))
	q.Set("_journal_mode", "WAL")
	return fileURI(path) + "?" + q.Encode()
}

// fileURI returns the SQLite URI of the file at path, escaped so that no
// character of the path is read as URI syntax.
func fileURI(path string) string {
	p := (&url.URL{Path: filepath.ToSlash(path)}).EscapedPath()
	if strings.HasPrefix(p, "/") {
		return "file://" + p
	}
	return "file:" + p
}
