// Package mmapfile maps regular files read-only: inputs of any size are read without
// copying them into the heap, and anything that is not a regular file (a device, a
// FIFO, a directory) is refused before it is read, since reading one would block or
// never end.
package mmapfile

import (
	"fmt"
	"io/fs"
	"os"
	"syscall"
	"unsafe"
)

// Map maps the regular file at path read-only; a file larger than max bytes is refused
// (what it is for names itself in the error: "too large to be a program").
func Map(path string, max int64, what string) ([]byte, error) {
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
		return nil, fmt.Errorf("%s: not a regular file (%s)", path, Kind(st.Mode()))
	}
	size := st.Size()
	if size > max {
		return nil, fmt.Errorf("%s: too large to be %s (%d bytes; the limit is %d GiB)", path, what, size, max>>30)
	}
	if size == 0 {
		return []byte{}, nil // the parser refuses it with its own message
	}
	data, err := syscall.Mmap(int(fd.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("%s: map: %w", path, err)
	}
	return data, nil
}

// Unmap releases a mapping Map made.
func Unmap(data []byte) error {
	if len(data) == 0 {
		return nil
	}
	return syscall.Munmap(data)
}

// Kind names a file type for messages: "a directory", "a FIFO"...
func Kind(m fs.FileMode) string {
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

// Release drops the resident pages of the whole pages inside b, a part of a mapping
// Map made, from this process's memory: b stays valid and reads the same bytes (the
// kernel reads them again from the page cache), but a pass over a 100 MB input no
// longer keeps 100 MB resident. For a slice that is not part of such a mapping it
// must not be called.
func Release(b []byte) {
	if len(b) == 0 {
		return
	}
	page := uintptr(os.Getpagesize())
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	skip := int((page - start%page) % page) // to the first whole page
	if skip >= len(b) {
		return
	}
	b = b[skip:]
	b = b[:uintptr(len(b))&^(page-1)]
	if len(b) == 0 {
		return
	}
	// a failure only leaves the pages resident
	_ = syscall.Madvise(b, syscall.MADV_DONTNEED)
}
