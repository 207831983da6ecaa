package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/claimbus/claimbus/lockstore/sqlite"
)

// This file is the embedded node's SQLite file (-data): where it is by
// default, the checks that give a bad path's cause in words before SQLite
// would say "unable to open database file (14)", and the clean-up of a
// file that a failed start created.

// defaultData is the default of -data: claimbus.db in the user's cache
// directory ($XDG_CACHE_HOME or ~/.cache on Linux, ~/Library/Caches on
// macOS), in the temporary directory when there is none. It is out of the
// working directory, which is often a clone of the repository, and it
// outlives a restart of the node, as a server's data should; it is only
// example data, so a cache that gets cleared loses nothing of value.
func defaultData() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	return filepath.Join(dir, "claimbus", "example_app", "claimbus.db")
}

// sqliteHeader is how every SQLite database file begins.
var sqliteHeader = []byte("SQLite format 3\x00")

// dataFile is the embedded node's SQLite file, checked by openDataFile.
type dataFile struct {
	path string
	// created says that openDataFile created the file; dirs are the
	// directories it created for it, innermost first.
	created bool
	dirs    []string
}

// openDataFile checks that path can be the embedded node's SQLite file,
// and creates it, empty, when it is missing; with mkdir it creates the
// missing directories too (the default -data's), else a missing directory
// is an error. Each error names the path and the cause.
func openDataFile(path string, mkdir bool) (*dataFile, error) {
	d := &dataFile{path: path}
	fi, err := os.Stat(path)
	switch {
	case err == nil && fi.IsDir():
		return nil, fmt.Errorf("-data %s is a directory: give a file, such as %s", path, filepath.Join(path, "claimbus.db"))
	case err == nil && !fi.Mode().IsRegular():
		return nil, fmt.Errorf("-data %s is not a regular file (%v): give a file", path, fi.Mode().Type())
	case err == nil:
		return d, checkExisting(path)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, d.pathError(err)
	}
	dir := filepath.Dir(path)
	if mkdir {
		if d.dirs, err = mkdirAll(dir); err != nil {
			return nil, fmt.Errorf("-data %s: cannot create its directory: %w", path, cause(err))
		}
	}
	switch fi, err := os.Stat(dir); {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("-data %s: the directory %s does not exist (create it, or give another -data)", path, dir)
	case err != nil:
		return nil, d.pathError(err)
	case !fi.IsDir():
		return nil, fmt.Errorf("-data %s: %s is not a directory", path, dir)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		d.remove()
		return nil, fmt.Errorf("-data %s: cannot create the file: %w", path, cause(err))
	}
	d.created = true
	if err := f.Close(); err != nil {
		d.remove()
		return nil, fmt.Errorf("-data %s: %w", path, err)
	}
	return d, nil
}

// checkExisting checks that the file at path can be opened for writing,
// and is empty or an SQLite database.
func checkExisting(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("-data %s: cannot open the file for writing: %w", path, cause(err))
	}
	defer func() { _ = f.Close() }() // read only: nothing to flush
	head := make([]byte, len(sqliteHeader))
	n, err := io.ReadFull(f, head)
	switch {
	case n == 0 && (err == nil || errors.Is(err, io.EOF)):
		return nil // empty: SQLite makes it a database
	case err != nil && !errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("-data %s: cannot read the file: %w", path, cause(err))
	case !bytes.Equal(head[:n], sqliteHeader):
		return fmt.Errorf("-data %s is not an SQLite database: give another -data (serve never writes over a file that is not one)", path)
	}
	return nil
}

// pathError words an error of looking up d.path, such as a file where a
// directory of the path should be.
func (d *dataFile) pathError(err error) error {
	if errors.Is(err, syscall.ENOTDIR) {
		// The innermost part of the path that exists is a file.
		for dir := filepath.Dir(d.path); dir != filepath.Dir(dir); dir = filepath.Dir(dir) {
			if fi, serr := os.Stat(dir); serr == nil && !fi.IsDir() {
				return fmt.Errorf("-data %s: %s is not a directory", d.path, dir)
			}
		}
	}
	return fmt.Errorf("-data %s: %w", d.path, cause(err))
}

// remove removes the file and the directories that openDataFile created,
// with the files that SQLite and the store put beside it, after a start
// that failed; a file that was there before is left as it was.
func (d *dataFile) remove() {
	if d.created {
		for _, suffix := range []string{"", "-wal", "-shm", "-journal", sqlite.LockFileSuffix} {
			_ = os.Remove(d.path + suffix)
		}
	}
	for _, dir := range d.dirs {
		_ = os.Remove(dir) // only if empty
	}
}

// mkdirAll creates dir and its missing parents, and returns those it
// created, innermost first.
func mkdirAll(dir string) ([]string, error) {
	var missing []string
	for p := dir; ; p = filepath.Dir(p) {
		if _, err := os.Stat(p); err == nil || p == filepath.Dir(p) {
			break
		}
		missing = append(missing, p)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return missing, nil
}

// cause is the system's words for a file error, without the path that
// the caller names already: "permission denied", "read-only file system".
func cause(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
