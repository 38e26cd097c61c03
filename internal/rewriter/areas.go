package rewriter

import (
	"fmt"

	"github.com/kprewrite/kprewrite/elfio"

	"github.com/kprewrite/kprewrite/internal/align"
)

// An area is one named piece of a new section (the probe tables, the detours, the
// runtime's code...). Areas are laid out in the order they were added, each at the
// next offset its alignment allows: the layout is this list, not a chain of offsets.
type area struct {
	name  string // the symbol naming it in .symtab; "" for none
	size  uint64
	align uint64
	off   uint64 // from the section's start, set by layout
}

// areaSection is one of the new sections as a list of areas.
type areaSection struct {
	name  string // elfio.SecText, SecRodata or SecBSS
	fill  byte   // between and after the areas' contents
	areas []*area
	size  uint64 // after layout
	addr  uint64 // after the ELF layout is planned
	buf   []byte // the contents, after alloc
}

// add appends an area of size bytes aligned to align.
func (s *areaSection) add(name string, size, align uint64) *area {
	a := &area{name: name, size: size, align: align}
	s.areas = append(s.areas, a)
	return a
}

// layout gives every area its offset and the section its size.
func (s *areaSection) layout() {
	end := uint64(0)
	for _, a := range s.areas {
		a.off = align.Up(end, a.align)
		end = a.off + a.size
	}
	s.size = end
}

// at is the address of a once the section is placed.
func (s *areaSection) at(a *area) uint64 { return s.addr + a.off }

// alloc makes the section's buffer, all fill; each area's part of it is then
// written in place through span, so no area's contents are held twice.
func (s *areaSection) alloc() []byte {
	s.buf = make([]byte, s.size)
	if s.fill != 0 {
		for i := range s.buf {
			s.buf[i] = s.fill
		}
	}
	return s.buf
}

// span is a's part of the buffer alloc made.
func (s *areaSection) span(a *area) []byte { return s.buf[a.off:][:a.size:a.size] }

// put copies b into a's part of the buffer.
func (s *areaSection) put(a *area, b []byte) error {
	if uint64(len(b)) > a.size {
		return fmt.Errorf("internal error: %s %s: %d bytes made for the %d reserved", s.name, a.name, len(b), a.size)
	}
	copy(s.span(a), b)
	return nil
}

// symbol names a, a named area, in .symtab.
func (s *areaSection) symbol(a *area) elfio.NewSymbol {
	return elfio.NewSymbol{Name: a.name, Section: s.name, Offset: a.off, Size: a.size}
}
