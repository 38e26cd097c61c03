package ldso

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	"github.com/kprewrite/kprewrite/internal/infile"
)

// CachePath is the loader's cache of the system's libraries (ldconfig writes it).
const CachePath = "/etc/ld.so.cache"

const (
	oldMagic = "ld.so-1.7.0"
	newMagic = "glibc-ld.so.cache1.1"
	// an entry's flags: FLAG_ELF_LIBC6 (3) in the type byte, FLAG_X8664_LIB64 (0x300)
	// in the architecture byte
	flagsX8664 = 0x0303
	newHdrSize = 48 // magic and version, nlibs, len_strings, flags, padding, extension offset, unused
	entrySize  = 24 // flags, key, value, osversion u32; hwcap u64
	oldEntry   = 12 // flags, key, value
)

// ErrCache reports a cache file this package cannot read.
var ErrCache = errors.New("bad ld.so cache")

// Cache maps library names (sonames) to paths for x86-64, first entry first, as
// ld.so's lookup takes the first suitable entry.
type Cache map[string]string

// ReadCache reads the loader's cache at path; a missing file is an empty cache, as
// for the loader.
func ReadCache(path string) (Cache, error) {
	b, err := infile.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return Cache{}, nil
	}
	if err != nil {
		return nil, err
	}
	c, err := ParseCache(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ParseCache parses a cache in the new format, alone or after an old-format part.
func ParseCache(b []byte) (Cache, error) {
	le := binary.LittleEndian
	if bytes.HasPrefix(b, []byte(oldMagic)) {
		// the old part: magic (padded to 12), nlibs, entries; the new part follows,
		// 8-aligned
		if len(b) < 16 {
			return nil, fmt.Errorf("%w: truncated old header", ErrCache)
		}
		n := uint64(le.Uint32(b[12:]))
		off := (16 + n*oldEntry + 7) &^ 7
		if n > uint64(len(b)) || off > uint64(len(b)) {
			return nil, fmt.Errorf("%w: %d old entries in %d bytes", ErrCache, n, len(b))
		}
		b = b[off:]
	}
	if len(b) < newHdrSize || !bytes.HasPrefix(b, []byte(newMagic)) {
		return nil, fmt.Errorf("%w: no %q header", ErrCache, newMagic)
	}
	n := uint64(le.Uint32(b[20:]))
	if n > uint64(len(b))/entrySize || newHdrSize+n*entrySize > uint64(len(b)) {
		return nil, fmt.Errorf("%w: %d entries in %d bytes", ErrCache, n, len(b))
	}
	str := func(off uint32) (string, bool) {
		if uint64(off) >= uint64(len(b)) {
			return "", false
		}
		s := b[off:]
		end := bytes.IndexByte(s, 0)
		if end < 0 {
			return "", false
		}
		return string(s[:end]), true
	}
	c := Cache{}
	for i := uint64(0); i < n; i++ {
		e := b[newHdrSize+i*entrySize:]
		if int32(le.Uint32(e)) != flagsX8664 {
			continue
		}
		key, ok1 := str(le.Uint32(e[4:]))
		val, ok2 := str(le.Uint32(e[8:]))
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("%w: entry %d names a string outside the file", ErrCache, i)
		}
		if _, dup := c[key]; !dup {
			c[key] = val
		}
	}
	return c, nil
}
