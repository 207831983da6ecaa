package sqlite

import (
	"errors"
	"fmt"
	"os"
	"sync"
)

// fileID is a file's identity on this machine: its device and inode
// numbers, which every name of the file shares (a hard link, a symlink, a
// bind mount), while the paths differ.
type fileID struct{ dev, ino uint64 }

// heldFiles are the database files the Stores of this process hold, by
// identity, with the path each was opened by (for the error message).
var heldFiles = struct {
	sync.Mutex
	paths map[fileID]string
}{paths: make(map[fileID]string)}

// fileGuard is a Store's hold on its database file: its place in heldFiles
// (against a second Store in this process) and two flocks (against one in
// another process), on the path's lock file and on the identity's.
type fileGuard struct {
	id       fileID
	pathLock *os.File // <database file>LockFileSuffix
	idLock   *os.File // in the lock directory, named by id
	idPath   string
}

// guardFile takes the guard of the database file at path, or fails with
// ErrFileLocked while another Store, in this process or another, holds
// the same file under any name. lockDir is the directory of the identity
// lock files.
func guardFile(path, lockDir string) (*fileGuard, error) {
	id, err := identify(path)
	if err != nil {
		return nil, err
	}
	heldFiles.Lock()
	if other, ok := heldFiles.paths[id]; ok {
		heldFiles.Unlock()
		return nil, fmt.Errorf("%w: %s is the file (device %d, inode %d) a Store of this process holds, opened as %s",
			ErrFileLocked, path, id.dev, id.ino, other)
	}
	heldFiles.paths[id] = path
	heldFiles.Unlock()

	g := &fileGuard{id: id}
	g.pathLock, err = lockFile(path + LockFileSuffix)
	if err == nil {
		g.idLock, g.idPath, err = lockIdentity(lockDir, id, path)
	}
	if err != nil {
		_ = g.release() // the error that matters is err
		return nil, err
	}
	return g, nil
}

// release lets the file go: the identity lock file is removed while still
// locked (see lockIdentity), then both locks end, then the file leaves
// heldFiles.
func (g *fileGuard) release() error {
	var err error
	if g.idLock != nil {
		err = unlockIdentity(g.idLock, g.idPath)
	}
	if g.pathLock != nil {
		err = errors.Join(err, unlockFile(g.pathLock))
	}
	heldFiles.Lock()
	delete(heldFiles.paths, g.id)
	heldFiles.Unlock()
	return err
}
