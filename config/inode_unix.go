//go:build unix

package config

import (
	"io/fs"
	"syscall"
)

// inode is the file's inode number: a file replaced by another with the
// same size and time is still seen as changed.
func inode(st fs.FileInfo) uint64 {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return uint64(s.Ino)
	}
	return 0
}
