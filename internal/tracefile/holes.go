package tracefile

import (
	"os"
	"sort"
	"syscall"
)

// The runtime gives a trace file's record area blocks chunk by chunk as records reach
// it, so the file is sparse; a block given out when the file system was full has none
// and stays a hole. A hole holds no records, and it is never read through the mapping:
// on tmpfs a read fault on a hole of a full file system is a SIGBUS.

const (
	seekData = 3       // SEEK_DATA
	seekHole = 4       // SEEK_HOLE
	maxHoles = 1 << 16 // a file with more is read as if it had the first ones only
)

// span is a range of file offsets, [from, to).
type span struct{ from, to uint64 }

// fileHoles returns the holes of the file at path, in order (none where the file system
// cannot say: it is read whole, as before).
func fileHoles(path string) []span {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil
	}
	fd, size := int(f.Fd()), st.Size()
	var holes []span
	for off := int64(0); off < size && len(holes) < maxHoles; {
		h, err := syscall.Seek(fd, off, seekHole)
		if err != nil || h >= size {
			break
		}
		d, err := syscall.Seek(fd, h, seekData)
		if err != nil { // ENXIO: a hole to the end
			d = size
		}
		if d > h && !bytesAt(f, h) {
			holes = append(holes, span{uint64(h), uint64(d)})
		}
		off = d
	}
	return holes
}

// holeEnd returns where the hole that holds off ends, or 0 when off is in none.
func holeEnd(holes []span, off uint64) uint64 {
	i := sort.Search(len(holes), func(i int) bool { return holes[i].to > off })
	if i < len(holes) && holes[i].from <= off {
		return holes[i].to
	}
	return 0
}

// bytesAt says whether the file holds non-zero bytes at off although SEEK_HOLE called
// it a hole (a file system that reports a written page as a hole before it allocates
// it): such a hole is read like data, or its records would be lost. pread of a real
// hole reads zeros and never faults.
func bytesAt(f *os.File, off int64) bool {
	var b [64]byte
	n, _ := f.ReadAt(b[:], off)
	for _, c := range b[:n] {
		if c != 0 {
			return true
		}
	}
	return false
}
