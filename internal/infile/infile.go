// Package infile opens the files a command reads whole (definitions, handler sources,
// debug information, sources, a binary's head) and refuses anything that is not a
// regular file before reading it: opening a FIFO with no writer waits for one, reading
// one waits for its writer to end, and a device may never end. The error names the
// file and what it is: "PATH: not a regular file (a FIFO)".
package infile

import (
	"fmt"
	"io"
	"os"
	"syscall"

	"github.com/kprewrite/kprewrite/internal/mmapfile"
)

// Open opens the regular file at path for reading. A FIFO, device, socket or
// directory is refused without blocking (the open is O_NONBLOCK, the check an fstat of
// what was opened).
func Open(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err // *PathError: "open PATH: reason"
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, NotRegular(path, st.Mode())
	}
	return f, nil
}

// ReadFile reads the regular file at path, as os.ReadFile does, refusing what Open
// refuses.
func ReadFile(path string) ([]byte, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// Check refuses a path that names something other than a regular file (following
// symbolic links), for a file another program or library opens (gcc, debug/elf). A
// path that cannot be examined is left to the opener, whose error says why.
func Check(path string) error {
	st, err := os.Stat(path)
	if err != nil || st.Mode().IsRegular() {
		return nil
	}
	return NotRegular(path, st.Mode())
}

// NotRegular is the error for path, whose mode is m.
func NotRegular(path string, m os.FileMode) error {
	return fmt.Errorf("%s: not a regular file (%s)", path, mmapfile.Kind(m))
}
