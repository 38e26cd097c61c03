package elfio

import (
	"fmt"
	"os"
	"path/filepath"
)

const writeChunk = 2 << 20

// WriteFileAtomic writes data to path so that path is either untouched or holds all of
// data: it writes a temporary file in the same directory, syncs it, sets perm and
// renames it over path. On error the temporary file is removed and path is unchanged.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
			err = fmt.Errorf("write %s: %w", path, err)
		}
	}()
	// in 2 MiB writes: one write(2) that meets a source page it cannot copy without a
	// fault goes on in smaller page-cache folios to its end; each write starts over with
	// the largest, so the kernel can map the new segments with 2 MiB pages
	// (layout.go, hugePage)
	for off := 0; off < len(data); off += writeChunk {
		if _, err = tmp.Write(data[off:min(off+writeChunk, len(data))]); err != nil {
			return err
		}
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
