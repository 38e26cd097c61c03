package elfio

import (
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// mapFile maps the regular file at path read-only. Anything else (a directory, a
// FIFO, a device such as /dev/zero) is refused before it is read: reading one would
// block, or never end.
func mapFile(path string) ([]byte, error) {
	// O_NONBLOCK: opening a FIFO that has no writer would otherwise wait for one
	fd, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err // *PathError: "open PATH: reason"
	}
	defer fd.Close()
	st, err := fd.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file (%s)", path, fileKind(st.Mode()))
	}
	size := st.Size()
	if size > MaxInputSize {
		return nil, fmt.Errorf("%s: too large to be a program (%d bytes; the limit is %d GiB)", path, size, MaxInputSize>>30)
	}
	if size == 0 {
		return []byte{}, nil // Parse refuses it with its own message
	}
	data, err := syscall.Mmap(int(fd.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("%s: map: %w", path, err)
	}
	return data, nil
}

func unmap(data []byte) error {
	if len(data) == 0 {
		return nil
	}
	return syscall.Munmap(data)
}

// fileKind names a file type for messages.
func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	default:
		return "not a regular file"
	}
}
