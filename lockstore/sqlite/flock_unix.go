//go:build unix

package sqlite

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// identify returns the identity of the file at path (following symlinks).
func identify(path string) (fileID, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileID{}, fmt.Errorf("sqlite: New: identify the database file: %w", err)
	}
	return idOf(fi), nil
}

func idOf(fi fs.FileInfo) fileID {
	st := fi.Sys().(*syscall.Stat_t)
	return fileID{dev: uint64(st.Dev), ino: uint64(st.Ino)} //nolint:unconvert // their types vary by system
}

// flock takes an exclusive flock on f without waiting. The lock belongs to
// f's open file description and ends when f is closed, or when the
// process dies; it is independent of the POSIX (fcntl) locks SQLite takes.
func flock(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// lockFile opens (creating it if need be) and flocks the file at path, the
// lock file next to the database file.
func lockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open lock file: %w", err)
	}
	if err := flock(f); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is locked by another process: one Store per database file", ErrFileLocked, path)
		}
		return nil, fmt.Errorf("sqlite: flock %s: %w", path, err)
	}
	return f, nil
}

// identityLockName is the name, in the lock directory, of the lock file of
// the database file id.
func identityLockName(id fileID) string {
	return fmt.Sprintf("claimbus-sqlite-%d-%d.lock", id.dev, id.ino)
}

// maxLockAttempts bounds lockIdentity's retries: each one means another
// process created or removed the lock file in the meantime.
const maxLockAttempts = 16

// lockIdentity opens (creating it if need be) and flocks the lock file of
// the database file id (at dbPath) in dir. Holders remove the file before
// they let go of it (unlockIdentity), so a lock taken is ours only if the
// name still leads to the file locked; else the file was a removed one and
// lockIdentity starts over.
//
// The directory is shared between users (a world-writable, sticky /tmp),
// so the file is opened read-only (flock needs no more), without following
// a symlink, without O_CREAT on a file that exists (fs.protected_regular
// refuses it on another user's file), without blocking (on a FIFO someone
// put there) and must be a regular file.
func lockIdentity(dir string, id fileID, dbPath string) (*os.File, string, error) {
	path := filepath.Join(dir, identityLockName(id))
	const open = os.O_RDONLY | syscall.O_NOFOLLOW | syscall.O_NONBLOCK
	for range maxLockAttempts {
		f, err := os.OpenFile(path, open, 0)
		if errors.Is(err, fs.ErrNotExist) {
			f, err = os.OpenFile(path, open|os.O_CREATE|os.O_EXCL, 0o644)
			if errors.Is(err, fs.ErrExist) {
				continue // created in the meantime: open that one
			}
			if err == nil {
				err = f.Chmod(0o644) // whatever the umask: other users must open it too
			}
		}
		if err != nil {
			if f != nil {
				_ = f.Close()
			}
			return nil, "", fmt.Errorf("sqlite: open lock file: %w", err)
		}
		fi, err := f.Stat()
		if err == nil && !fi.Mode().IsRegular() {
			err = fmt.Errorf("%s is not a regular file", path)
		}
		if err == nil {
			err = flock(f)
		}
		if err != nil {
			_ = f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, "", fmt.Errorf("%w: another process holds %s under another name (device %d, inode %d): %s is locked",
					ErrFileLocked, dbPath, id.dev, id.ino, path)
			}
			return nil, "", fmt.Errorf("sqlite: lock %s: %w", path, err)
		}
		if names(path, fi) {
			return f, path, nil
		}
		_ = f.Close() // removed by its last holder: start over
	}
	return nil, "", fmt.Errorf("sqlite: lock %s: the file was replaced %d times in a row", path, maxLockAttempts)
}

// names reports whether path is, now, the file fi describes.
func names(path string, fi fs.FileInfo) bool {
	now, err := os.Lstat(path)
	return err == nil && os.SameFile(now, fi)
}

// unlockIdentity removes the lock file at path, while f still holds its
// lock, and closes f. Removing it first is what makes the removal safe: a
// process that opened the file before and locks it after finds the name
// gone (lockIdentity). The file is left in place when path no longer
// names f's file (someone removed it, and the name may be another
// holder's now) or when removing fails (another user's file in a sticky
// directory): a lock file left behind is harmless.
func unlockIdentity(f *os.File, path string) error {
	if fi, err := f.Stat(); err == nil && names(path, fi) {
		_ = os.Remove(path)
	}
	return unlockFile(f)
}

// unlockFile lets go of f's flock, then closes f. The explicit unlock
// ends the lock on the open file description itself: a child process
// forked meanwhile (by os/exec, anywhere in the process) holds a copy of
// the descriptor until it execs, and a plain close would leave the lock
// with that copy for that long.
func unlockFile(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	return f.Close()
}
