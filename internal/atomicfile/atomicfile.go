// Package atomicfile writes an output file so that its path holds either what was there
// or the whole new contents, never a part: a temporary file beside it, synced, renamed
// over it, removed on an error or an interrupting signal (internal/cleanup).
package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"

	"github.com/kprewrite/kprewrite/internal/cleanup"
	"github.com/kprewrite/kprewrite/internal/mmapfile"
)

// createTemp creates a new file dir/prefixNNN registered for removal on an
// interrupting signal before it exists (os.CreateTemp then cleanup.Add left it behind
// when the signal came between the two), and returns the unregistering function.
func createTemp(dir, prefix string) (*os.File, func(), error) {
	if dir == "" {
		dir = "."
	}
	for try := 0; ; try++ {
		// 64 random bits: a name another process made (EEXIST) is never ours to remove
		name := filepath.Join(dir, prefix+strconv.FormatUint(rand.Uint64(), 36))
		done := cleanup.Add(name)
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			return f, done, nil
		}
		done()
		if !errors.Is(err, fs.ErrExist) || try == 10000 {
			return nil, nil, err
		}
	}
}

// WriteFile writes src to path so that path is either untouched or holds all of
// it: it writes a temporary file in the same directory, syncs it, sets perm and
// renames it over path. On error the temporary file is removed and path is unchanged.
//
// An existing path must be a regular file or a symbolic link to one (the link is
// replaced, its target left alone): a device, FIFO, socket or directory there, or a
// link to one, is refused, so that "-o /dev/null" cannot replace /dev/null.
func WriteFile(path string, src io.WriterTo, perm os.FileMode) (err error) {
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		return fmt.Errorf("write %s: exists and is not a regular file (%s); not replaced", path, mmapfile.Kind(st.Mode()))
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, done, err := createTemp(dir, "."+base+".tmp-")
	if err != nil {
		// the user named path, not our temporary file: say what is wrong with its directory
		var pe *fs.PathError
		if errors.As(err, &pe) && errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("write %s: directory %s does not exist: %w", path, filepath.Clean(dir), pe.Err)
		} else if errors.As(err, &pe) {
			return fmt.Errorf("write %s: cannot create a file in %s: %w", path, filepath.Clean(dir), pe.Err)
		}
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer done() // removed on SIGINT or SIGTERM until renamed
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
			err = fmt.Errorf("write %s: %w", path, err)
		}
	}()
	// (an elfio.Output writes in 2 MiB writes, so that the page cache keeps the new
	// segments in large folios: see elfio/output.go)
	if _, err = src.WriteTo(tmp); err != nil {
		return err
	}
	if err = tmp.Chmod(perm); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	// Make the rename itself durable; failure here leaves a complete file in place.
	if d, derr := os.Open(dir); derr == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
