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
	le := binary.LittleEndian
	if len(data) < 64 || string(data[:4]) != elf.ELFMAG {
		return nil, objErr(name, "not an ELF file")
	}
	if elf.Class(data[elf.EI_CLASS]) != elf.ELFCLASS64 || elf.Data(data[elf.EI_DATA]) != elf.ELFDATA2LSB {
		return nil, objErr(name, "not a little-endian ELF64 file")
	}
	if t := elf.Type(le.Uint16(data[16:])); t != elf.ET_REL {
		return nil, objErr(name, "ELF type %v, want a relocatable object (ET_REL)", t)
	}
	if m := elf.Machine(le.Uint16(data[18:])); m != elf.EM_X86_64 {
		return nil, objErr(name, "machine %v, want x86-64", m)
	}
	shoff := le.Uint64(data[40:])
	shentsize := uint64(le.Uint16(data[58:]))
	shnum := uint64(le.Uint16(data[60:]))
	shstrndx := uint64(le.Uint16(data[62:]))
	n := uint64(len(data))
	if shentsize != 64 || shnum == 0 || shnum > n/64 || shoff > n || shnum*64 > n-shoff {
		return nil, objErr(name, "section header table at %#x (%d entries of %d bytes) is outside the file", shoff, shnum, shentsize)
	}
	if shstrndx >= shnum {
		return nil, objErr(name, "section name table index %d out of range", shstrndx)
	}
	type rawSec struct {
		name               uint32
		typ                elf.SectionType
		flags              elf.SectionFlag
		off, size, entsize uint64
		link, info         uint32
		align              uint64
	}
	raw := make([]rawSec, shnum)
	for i := range raw {
		s := data[shoff+uint64(i)*64:]
		raw[i] = rawSec{
			name: le.Uint32(s[0:]), typ: elf.SectionType(le.Uint32(s[4:])), flags: elf.SectionFlag(le.Uint64(s[8:])),
			off: le.Uint64(s[24:]), size: le.Uint64(s[32:]), link: le.Uint32(s[40:]), info: le.Uint32(s[44:]),
			align: le.Uint64(s[48:]), entsize: le.Uint64(s[56:]),
		}
		if raw[i].typ != elf.SHT_NOBITS && raw[i].typ != elf.SHT_NULL && (raw[i].off > n || raw[i].size > n-raw[i].off) {
			return nil, objErr(name, "section %d: file range %#x+%#x outside the file", i, raw[i].off, raw[i].size)
		}
		if raw[i].align > 1<<16 {
			return nil, objErr(name, "section %d: alignment %#x is too large", i, raw[i].align)
		}
	}
	str := func(tab int, off uint32) (string, error) {
		if tab <= 0 || tab >= len(raw) || raw[tab].typ != elf.SHT_STRTAB {
			return "", fmt.Errorf("string table %d is not a string table", tab)
		}
		b := data[raw[tab].off : raw[tab].off+raw[tab].size]
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
	o := &Object{Name: name}
	o.sections = make([]*section, shnum)
	symtab := -1
	for i, r := range raw {
		nm, err := str(int(shstrndx), r.name)
		if err != nil && i != 0 {
			return nil, objErr(name, "section %d name: %v", i, err)
		}
		s := &section{index: i, name: nm, typ: r.typ, flags: r.flags, align: max(r.align, 1), size: r.size}
		if r.typ != elf.SHT_NOBITS && r.typ != elf.SHT_NULL {
			s.data = data[r.off : r.off+r.size : r.off+r.size]
		}
		if r.flags&elf.SHF_ALLOC != 0 {
			switch {
			case r.typ == elf.SHT_NOBITS:
				s.area = AreaBSS
			case r.flags&elf.SHF_EXECINSTR != 0:
				s.area = AreaText
			case r.flags&elf.SHF_WRITE != 0:
				s.area = AreaData
			default:
				s.area = AreaRodata
			}
		}
		switch r.typ {
		case elf.SHT_INIT_ARRAY, elf.SHT_FINI_ARRAY, elf.SHT_PREINIT_ARRAY:
			return nil, objErr(name, "section %s: constructors and destructors are not supported", nm)
		case shtX8664Unwind:
			s.area = AreaNone // unwind tables of linked-in code are not registered anywhere
		case elf.SHT_SYMTAB:
			if symtab >= 0 {
				return nil, objErr(name, "more than one symbol table")
			}
			symtab = i
		case elf.SHT_REL:
			return nil, objErr(name, "section %s: REL relocations are not supported on x86-64 (RELA only)", nm)
		}
		if r.flags&elf.SHF_TLS != 0 && r.flags&elf.SHF_ALLOC != 0 {
			return nil, objErr(name, "section %s: thread-local storage is not supported", nm)
		}
		o.sections[i] = s
	}
	if symtab < 0 {
		return nil, objErr(name, "no symbol table")
	}
	st := raw[symtab]
	if st.size%24 != 0 {
		return nil, objErr(name, "symbol table size %#x is not a multiple of 24", st.size)
	}
	for i := uint64(0); i < st.size/24; i++ {
		e := data[st.off+i*24:]
		sym := symbol{
			value: le.Uint64(e[8:]), size: le.Uint64(e[16:]),
			typ: elf.ST_TYPE(e[4]), bind: elf.ST_BIND(e[4]), shndx: le.Uint16(e[6:]),
		}
		if i > 0 {
			nm, err := str(int(st.link), le.Uint32(e[0:]))
			if err != nil {
				return nil, objErr(name, "symbol %d name: %v", i, err)
			}
			sym.name = nm
		}
		if sym.shndx == uint16(elf.SHN_XINDEX) {
			return nil, objErr(name, "symbol %d: extended section indexes are not supported", i)
		}
		if sym.shndx != uint16(elf.SHN_UNDEF) && sym.shndx < uint16(elf.SHN_LORESERVE) && uint64(sym.shndx) >= shnum {
			return nil, objErr(name, "symbol %q: section index %d out of range", sym.name, sym.shndx)
		}
		if sym.typ == elf.STT_TLS {
			return nil, objErr(name, "symbol %q: thread-local storage is not supported", sym.name)
		}
		o.symbols = append(o.symbols, sym)
	}
	for i, r := range raw {
		if r.typ != elf.SHT_RELA {
			continue
		}
		if uint64(r.info) >= shnum || int(r.link) != symtab {
			return nil, objErr(name, "relocation section %d: bad target %d or symbol table %d", i, r.info, r.link)
		}
		target := o.sections[r.info]
		if target.area == AreaNone {
			continue // relocations of debug info and unwind tables are not needed
		}
		if r.size%24 != 0 {
			return nil, objErr(name, "relocation section %d size %#x is not a multiple of 24", i, r.size)
		}
		for j := uint64(0); j < r.size/24; j++ {
			e := data[r.off+j*24:]
			info := le.Uint64(e[8:])
			rl := rela{off: le.Uint64(e[0:]), typ: elf.R_X86_64(info & 0xffffffff), sym: uint32(info >> 32), addend: int64(le.Uint64(e[16:]))}
			if int(rl.sym) >= len(o.symbols) {
				return nil, objErr(name, "relocation %d of %s: symbol index %d out of range", j, target.name, rl.sym)
			}
			if rl.off > target.size || target.size-rl.off < 4 {
				return nil, objErr(name, "relocation %d of %s: offset %#x outside the section", j, target.name, rl.off)
			}
			target.rela = append(target.rela, rl)
		}
	}
	return o, nil
}
