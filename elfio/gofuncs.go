package elfio

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"sort"

	"github.com/kprewrite/kprewrite/internal/gopclntab"
)

// The words of the Go runtime's moduledata (runtime/symtab.go, Go 1.18 and later)
// that locate it and hold the text base: pcHeader, then funcnametab, cutab, filetab,
// pctab, pclntable and ftab (slices of 3 words), findfunctab, minpc, maxpc, text.
const (
	mdFuncnametab = 1
	mdFtab        = 16
	mdText        = 22
)

// GoFuncs reads the function table of a Go program from .gopclntab: nil without one.
// The entries are offsets from the runtime's text base, stored in the table's header
// up to Go 1.19 and since only in the runtime's moduledata, found by its first words
// (the table's address and its name table's).
func (f *File) GoFuncs() ([]gopclntab.Func, error) {
	s := f.Section(".gopclntab")
	if s == nil || s.Type != elf.SHT_PROGBITS {
		return nil, nil
	}
	data := f.SectionData(s)
	h, err := gopclntab.ParseHeader(data)
	if err != nil {
		return nil, fmt.Errorf("%s: .gopclntab: %w", f.Path, err)
	}
	text := h.TextStart
	if text == 0 {
		if text, err = f.goText(s.Addr, h); err != nil {
			return nil, fmt.Errorf("%s: .gopclntab: %w", f.Path, err)
		}
	}
	fns, err := gopclntab.Parse(data, text)
	if err != nil {
		return nil, fmt.Errorf("%s: .gopclntab: %w", f.Path, err)
	}
	if first, last := fns[0], fns[len(fns)-1]; !f.inExec(first.Entry, last.End) {
		return nil, fmt.Errorf("%s: .gopclntab: %w: functions %#x-%#x (text base %#x) are not all in one executable section",
			f.Path, gopclntab.ErrFormat, first.Entry, last.End, text)
	}
	return fns, nil
}

// inExec reports whether [lo, hi) lies inside one executable section.
func (f *File) inExec(lo, hi uint64) bool {
	for _, s := range f.ExecSections() {
		if lo >= s.Addr && hi >= lo && hi-s.Addr <= s.Size {
			return true
		}
	}
	return false
}

// goText finds the text base in the runtime's moduledata: first with the words as the
// file holds them (Go's own linker writes them even where a relocation also does),
// then through the R_X86_64_RELATIVE relocations of a PIE whose linker left them 0.
func (f *File) goText(pcAddr uint64, h gopclntab.Header) (uint64, error) {
	read := func(addr uint64) uint64 {
		b, err := f.Bytes(addr, 8)
		if err != nil {
			return 0
		}
		return binary.LittleEndian.Uint64(b)
	}
	if text := moduledataText(f.wordsEqual(pcAddr), read, pcAddr, h); text != 0 {
		return text, nil
	}
	rel := f.relativeRelocs()
	var at []uint64
	for off, addend := range rel {
		if addend == pcAddr {
			at = append(at, off)
		}
	}
	sort.Slice(at, func(i, j int) bool { return at[i] < at[j] })
	readRel := func(addr uint64) uint64 {
		if v, ok := rel[addr]; ok {
			return v
		}
		return read(addr)
	}
	if text := moduledataText(at, readRel, pcAddr, h); text != 0 {
		return text, nil
	}
	return 0, fmt.Errorf("%w: no runtime moduledata points at the table (%#x): the text base its entries are offsets from is unknown", gopclntab.ErrFormat, pcAddr)
}

// moduledataText returns the text field of the first candidate that is the
// moduledata of the table at pcAddr (its name table and functab where the header
// says), 0 when none is.
func moduledataText(cands []uint64, read func(uint64) uint64, pcAddr uint64, h gopclntab.Header) uint64 {
	for _, at := range cands {
		if read(at) != pcAddr || read(at+8*mdFuncnametab) != pcAddr+h.FuncnameOff || read(at+8*mdFtab) != pcAddr+h.PclnOff {
			continue
		}
		if text := read(at + 8*mdText); text != 0 {
			return text
		}
	}
	return 0
}

// wordsEqual returns the addresses of the aligned words equal to v in the allocated,
// writable sections with file contents, .go.module (Go 1.26's home of the
// moduledata) first.
func (f *File) wordsEqual(v uint64) []uint64 {
	var secs []*Section
	if s := f.Section(".go.module"); s != nil {
		secs = append(secs, s)
	}
	for i := range f.Sections {
		s := &f.Sections[i]
		if s.Name != ".go.module" && s.Type == elf.SHT_PROGBITS && s.Flags&elf.SHF_ALLOC != 0 && s.Flags&elf.SHF_WRITE != 0 {
			secs = append(secs, s)
		}
	}
	var out []uint64
	for _, s := range secs {
		d := f.SectionData(s)
		for off := (8 - s.Addr%8) % 8; off+8 <= uint64(len(d)); off += 8 {
			if binary.LittleEndian.Uint64(d[off:]) == v {
				out = append(out, s.Addr+off)
			}
		}
	}
	return out
}

// relativeRelocs maps each R_X86_64_RELATIVE relocation's place to its addend, from
// the allocated SHT_RELA sections.
func (f *File) relativeRelocs() map[uint64]uint64 {
	m := map[uint64]uint64{}
	for i := range f.Sections {
		s := &f.Sections[i]
		if s.Type != elf.SHT_RELA || s.Flags&elf.SHF_ALLOC == 0 {
			continue
		}
		d := f.SectionData(s)
		for ; len(d) >= 24; d = d[24:] {
			le := binary.LittleEndian
			if elf.R_X86_64(le.Uint64(d[8:])&0xffffffff) == elf.R_X86_64_RELATIVE {
				m[le.Uint64(d)] = le.Uint64(d[16:])
			}
		}
	}
	return m
}

// goFuncsWanted reports whether f is a Go program whose symbol table names no
// function of its .text (stripped with -s, or rewritten from one: the new .symtab
// names only the new code), so that its functions come from .gopclntab.
func (f *File) goFuncsWanted() bool {
	text := f.Section(".text")
	if f.Section(".gopclntab") == nil || text == nil {
		return false
	}
	for _, s := range f.Symbols {
		if !s.Dynamic && (s.Type == elf.STT_FUNC || s.Type == elf.STT_GNU_IFUNC) && s.Value >= text.Addr && s.Value-text.Addr < text.Size {
			return false
		}
	}
	return true
}
