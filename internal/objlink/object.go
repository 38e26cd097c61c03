package objlink

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
)

// shtX8664Unwind is SHT_X86_64_UNWIND, the type of .eh_frame in x86-64 objects.
const shtX8664Unwind elf.SectionType = 0x70000001

// ErrObject is wrapped by every error about a malformed or unsupported object file.
var ErrObject = errors.New("bad object file")

// Area is one of the output areas sections are placed in.
type Area uint8

const (
	AreaNone   Area = iota // not loaded (debug info, notes, comments)
	AreaText               // R-X
	AreaRodata             // R
	AreaData               // RW
	AreaBSS                // RW, zero-filled
)

func (a Area) String() string {
	return [...]string{"none", "text", "rodata", "data", "bss"}[a]
}

type section struct {
	index int
	name  string
	typ   elf.SectionType
	flags elf.SectionFlag
	align uint64
	size  uint64
	data  []byte // nil for NOBITS
	area  Area
	rela  []rela
	// set by the linker
	offset uint64 // offset inside its area
}

type rela struct {
	off    uint64
	typ    elf.R_X86_64
	sym    uint32
	addend int64
}

type symbol struct {
	name  string
	value uint64
	size  uint64
	typ   elf.SymType
	bind  elf.SymBind
	shndx uint16
}

// Object is a parsed x86-64 ELF64 relocatable object (ET_REL).
type Object struct {
	Name     string
	sections []*section
	symbols  []symbol
}

func objErr(name, format string, args ...any) error {
	return fmt.Errorf("%s: %w: "+format, append([]any{name, ErrObject}, args...)...)
}

// ParseObject validates data as an x86-64 relocatable object. It never panics.
func ParseObject(name string, data []byte) (*Object, error) {
	or := &objReader{name: name, data: data}
	if err := or.header(); err != nil {
		return nil, err
	}
	if err := or.sectionHeaders(); err != nil {
		return nil, err
	}
	o := &Object{Name: name}
	symtab, err := or.sections(o)
	if err != nil {
		return nil, err
	}
	if err := or.symbols(o, symtab); err != nil {
		return nil, err
	}
	if err := or.relocations(o, symtab); err != nil {
		return nil, err
	}
	return o, nil
}

// objReader is ParseObject's view of the file: its section header table's place and
// the raw section headers, each checked to lie inside the file.
type objReader struct {
	name     string
	data     []byte
	shoff    uint64
	shnum    uint64
	shstrndx uint64
	raw      []rawSec
}

// rawSec is a section header as the file has it.
type rawSec struct {
	name               uint32
	typ                elf.SectionType
	flags              elf.SectionFlag
	off, size, entsize uint64
	link, info         uint32
	align              uint64
}

// header accepts only a little-endian ELF64 relocatable object for x86-64 whose
// section header table and name table index lie inside it.
func (or *objReader) header() error {
	le, name, data := binary.LittleEndian, or.name, or.data
	if len(data) < 64 || string(data[:4]) != elf.ELFMAG {
		return objErr(name, "not an ELF file")
	}
	if elf.Class(data[elf.EI_CLASS]) != elf.ELFCLASS64 || elf.Data(data[elf.EI_DATA]) != elf.ELFDATA2LSB {
		return objErr(name, "not a little-endian ELF64 file")
	}
	if t := elf.Type(le.Uint16(data[16:])); t != elf.ET_REL {
		return objErr(name, "ELF type %v, want a relocatable object (ET_REL)", t)
	}
	if m := elf.Machine(le.Uint16(data[18:])); m != elf.EM_X86_64 {
		return objErr(name, "machine %v, want x86-64", m)
	}
	or.shoff = le.Uint64(data[40:])
	shentsize := uint64(le.Uint16(data[58:]))
	or.shnum = uint64(le.Uint16(data[60:]))
	or.shstrndx = uint64(le.Uint16(data[62:]))
	n := uint64(len(data))
	if shentsize != 64 || or.shnum == 0 || or.shnum > n/64 || or.shoff > n || or.shnum*64 > n-or.shoff {
		return objErr(name, "section header table at %#x (%d entries of %d bytes) is outside the file", or.shoff, or.shnum, shentsize)
	}
	if or.shstrndx >= or.shnum {
		return objErr(name, "section name table index %d out of range", or.shstrndx)
	}
	return nil
}

// sectionHeaders reads the section headers: each one's contents inside the file,
// its alignment at most 64 KiB.
func (or *objReader) sectionHeaders() error {
	le, data, n := binary.LittleEndian, or.data, uint64(len(or.data))
	or.raw = make([]rawSec, or.shnum)
	raw := or.raw
	for i := range raw {
		s := data[or.shoff+uint64(i)*64:]
		raw[i] = rawSec{
			name: le.Uint32(s[0:]), typ: elf.SectionType(le.Uint32(s[4:])), flags: elf.SectionFlag(le.Uint64(s[8:])),
			off: le.Uint64(s[24:]), size: le.Uint64(s[32:]), link: le.Uint32(s[40:]), info: le.Uint32(s[44:]),
			align: le.Uint64(s[48:]), entsize: le.Uint64(s[56:]),
		}
		if raw[i].typ != elf.SHT_NOBITS && raw[i].typ != elf.SHT_NULL && (raw[i].off > n || raw[i].size > n-raw[i].off) {
			return objErr(or.name, "section %d: file range %#x+%#x outside the file", i, raw[i].off, raw[i].size)
		}
		if raw[i].align > 1<<16 {
			return objErr(or.name, "section %d: alignment %#x is too large", i, raw[i].align)
		}
	}
	return nil
}

// str is the NUL-terminated string at off of string table tab.
func (or *objReader) str(tab int, off uint32) (string, error) {
	raw := or.raw
	if tab <= 0 || tab >= len(raw) || raw[tab].typ != elf.SHT_STRTAB {
		return "", fmt.Errorf("string table %d is not a string table", tab)
	}
	b := or.data[raw[tab].off : raw[tab].off+raw[tab].size]
	if uint64(off) >= uint64(len(b)) {
		return "", fmt.Errorf("string offset %#x outside its table", off)
	}
	for i := int(off); i < len(b); i++ {
		if b[i] == 0 {
			return string(b[off:i]), nil
		}
	}
	return "", fmt.Errorf("string at %#x is not terminated", off)
}

// sections makes o's sections, each in the area of the image it is linked into
// (none for what is not allocated, and for unwind tables, which nothing would
// register); it refuses what the linker cannot place (constructors, REL relocations,
// thread-local storage) and returns the one symbol table's index.
func (or *objReader) sections(o *Object) (symtab int, err error) {
	name := or.name
	o.sections = make([]*section, or.shnum)
	symtab = -1
	for i, r := range or.raw {
		nm, err := or.str(int(or.shstrndx), r.name)
		if err != nil && i != 0 {
			return 0, objErr(name, "section %d name: %v", i, err)
		}
		s := &section{index: i, name: nm, typ: r.typ, flags: r.flags, align: max(r.align, 1), size: r.size}
		if r.typ != elf.SHT_NOBITS && r.typ != elf.SHT_NULL {
			s.data = or.data[r.off : r.off+r.size : r.off+r.size]
		}
		s.area = areaOf(r)
		switch r.typ {
		case elf.SHT_INIT_ARRAY, elf.SHT_FINI_ARRAY, elf.SHT_PREINIT_ARRAY:
			return 0, objErr(name, "section %s: constructors and destructors are not supported", nm)
		case shtX8664Unwind:
			s.area = AreaNone // unwind tables of linked-in code are not registered anywhere
		case elf.SHT_SYMTAB:
			if symtab >= 0 {
				return 0, objErr(name, "more than one symbol table")
			}
			symtab = i
		case elf.SHT_REL:
			return 0, objErr(name, "section %s: REL relocations are not supported on x86-64 (RELA only)", nm)
		}
		if r.flags&elf.SHF_TLS != 0 && r.flags&elf.SHF_ALLOC != 0 {
			return 0, objErr(name, "section %s: thread-local storage is not supported", nm)
		}
		o.sections[i] = s
	}
	if symtab < 0 {
		return 0, objErr(name, "no symbol table")
	}
	return symtab, nil
}

// areaOf is the area an allocated section goes to by its type and flags: bss,
// text, data or rodata; AreaNone for a section not loaded.
func areaOf(r rawSec) Area {
	if r.flags&elf.SHF_ALLOC == 0 {
		return AreaNone
	}
	switch {
	case r.typ == elf.SHT_NOBITS:
		return AreaBSS
	case r.flags&elf.SHF_EXECINSTR != 0:
		return AreaText
	case r.flags&elf.SHF_WRITE != 0:
		return AreaData
	default:
		return AreaRodata
	}
}

// symbols reads o's symbols from table symtab, refusing extended section indexes,
// indexes past the sections, and thread-local symbols.
func (or *objReader) symbols(o *Object, symtab int) error {
	le, name := binary.LittleEndian, or.name
	st := or.raw[symtab]
	if st.size%24 != 0 {
		return objErr(name, "symbol table size %#x is not a multiple of 24", st.size)
	}
	for i := uint64(0); i < st.size/24; i++ {
		e := or.data[st.off+i*24:]
		sym := symbol{
			value: le.Uint64(e[8:]), size: le.Uint64(e[16:]),
			typ: elf.ST_TYPE(e[4]), bind: elf.ST_BIND(e[4]), shndx: le.Uint16(e[6:]),
		}
		if i > 0 {
			nm, err := or.str(int(st.link), le.Uint32(e[0:]))
			if err != nil {
				return objErr(name, "symbol %d name: %v", i, err)
			}
			sym.name = nm
		}
		if sym.shndx == uint16(elf.SHN_XINDEX) {
			return objErr(name, "symbol %d: extended section indexes are not supported", i)
		}
		if sym.shndx != uint16(elf.SHN_UNDEF) && sym.shndx < uint16(elf.SHN_LORESERVE) && uint64(sym.shndx) >= or.shnum {
			return objErr(name, "symbol %q: section index %d out of range", sym.name, sym.shndx)
		}
		if sym.typ == elf.STT_TLS {
			return objErr(name, "symbol %q: thread-local storage is not supported", sym.name)
		}
		o.symbols = append(o.symbols, sym)
	}
	return nil
}

// relocations gives each loaded section its RELA relocations (those of sections
// not loaded, debug info and unwind tables, are not needed); each names a symbol
// of the table and patches at least 4 bytes inside its section.
func (or *objReader) relocations(o *Object, symtab int) error {
	le, name := binary.LittleEndian, or.name
	for i, r := range or.raw {
		if r.typ != elf.SHT_RELA {
			continue
		}
		if uint64(r.info) >= or.shnum || int(r.link) != symtab {
			return objErr(name, "relocation section %d: bad target %d or symbol table %d", i, r.info, r.link)
		}
		target := o.sections[r.info]
		if target.area == AreaNone {
			continue // relocations of debug info and unwind tables are not needed
		}
		if r.size%24 != 0 {
			return objErr(name, "relocation section %d size %#x is not a multiple of 24", i, r.size)
		}
		for j := uint64(0); j < r.size/24; j++ {
			e := or.data[r.off+j*24:]
			info := le.Uint64(e[8:])
			rl := rela{off: le.Uint64(e[0:]), typ: elf.R_X86_64(info & 0xffffffff), sym: uint32(info >> 32), addend: int64(le.Uint64(e[16:]))}
			if int(rl.sym) >= len(o.symbols) {
				return objErr(name, "relocation %d of %s: symbol index %d out of range", j, target.name, rl.sym)
			}
			if rl.off > target.size || target.size-rl.off < 4 {
				return objErr(name, "relocation %d of %s: offset %#x outside the section", j, target.name, rl.off)
			}
			target.rela = append(target.rela, rl)
		}
	}
	return nil
}
