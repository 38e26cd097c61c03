package elfio

import (
	"debug/elf"
	"encoding/binary"
	"fmt"

	"github.com/kprewrite/kprewrite/internal/align"
)

const (
	ntGNUPropertyType0     = 5          // NT_GNU_PROPERTY_TYPE_0
	gnuPropertyX86Feature1 = 0xc0000002 // GNU_PROPERTY_X86_FEATURE_1_AND
	// X86Feature1IBT and X86Feature1SHSTK are the bits of GNU_PROPERTY_X86_FEATURE_1_AND.
	X86Feature1IBT   = 1 << 0
	X86Feature1SHSTK = 1 << 1
)

// X86Features returns the GNU_PROPERTY_X86_FEATURE_1_AND bits (IBT, SHSTK) of the
// executable's property note, 0 when it has none.
func (f *File) X86Features() (uint32, error) {
	var bits uint32
	err := f.eachX86Feature(func(addr uint64, v uint32) { bits |= v })
	return bits, err
}

// ClearShadowStack returns the patches that clear the SHSTK bit in the executable's
// property notes, so that the loader does not enable CET shadow stacks: return probes
// replace return addresses, which a shadow stack would reject. It returns no patches
// when the bit is not set.
func (f *File) ClearShadowStack() ([]Patch, error) {
	var ps []Patch
	seen := map[uint64]bool{}
	err := f.eachX86Feature(func(addr uint64, v uint32) {
		if v&X86Feature1SHSTK == 0 || seen[addr] {
			return
		}
		seen[addr] = true
		b := binary.LittleEndian.AppendUint32(nil, v&^X86Feature1SHSTK)
		ps = append(ps, Patch{Addr: addr, Bytes: b})
	})
	return ps, err
}

// eachX86Feature calls fn with the address and value of every
// GNU_PROPERTY_X86_FEATURE_1_AND word in the PT_NOTE segments.
func (f *File) eachX86Feature(fn func(addr uint64, v uint32)) error {
	le := binary.LittleEndian
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE {
			continue
		}
		noteAlign := uint64(4)
		if p.Align == 8 {
			noteAlign = 8
		}
		d := f.Data[p.Off : p.Off+p.Filesz] // bounds checked by Parse
		for off := uint64(0); off+12 <= uint64(len(d)); {
			namesz, descsz, typ := uint64(le.Uint32(d[off:])), uint64(le.Uint32(d[off+4:])), le.Uint32(d[off+8:])
			nameOff := off + 12
			descOff := align.Up(nameOff+namesz, noteAlign)
			next := align.Up(descOff+descsz, noteAlign)
			if descOff > uint64(len(d)) || descsz > uint64(len(d))-descOff {
				return fmt.Errorf("%s: note at %#x in segment %d runs past the segment", f.Path, p.Vaddr+off, p.Index)
			}
			if typ == ntGNUPropertyType0 && namesz == 4 && string(d[nameOff:nameOff+4]) == "GNU\x00" {
				desc := d[descOff : descOff+descsz]
				for q := uint64(0); q+8 <= uint64(len(desc)); {
					prType, prSize := le.Uint32(desc[q:]), uint64(le.Uint32(desc[q+4:]))
					if prSize > uint64(len(desc))-q-8 {
						return fmt.Errorf("%s: property %#x at %#x runs past its note", f.Path, prType, p.Vaddr+descOff+q)
					}
					if prType == gnuPropertyX86Feature1 && prSize == 4 {
						fn(p.Vaddr+descOff+q+8, le.Uint32(desc[q+8:]))
					}
					q = align.Up(q+8+prSize, 8)
				}
			}
			if next <= off {
				break
			}
			off = next
		}
	}
	return nil
}
