package objlink

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"math"
	"sort"

	"github.com/kprewrite/kprewrite/internal/align"
)

// Sizes are the byte sizes of the four output areas.
type Sizes struct{ Text, Rodata, Data, BSS uint64 }

// Bases are the link-time virtual addresses of the four output areas.
type Bases struct{ Text, Rodata, Data, BSS uint64 }

func (b Bases) of(a Area) uint64 {
	switch a {
	case AreaText:
		return b.Text
	case AreaRodata:
		return b.Rodata
	case AreaData:
		return b.Data
	default:
		return b.BSS
	}
}

// Symbol is a defined symbol of the linked output.
type Symbol struct {
	Name   string
	Area   Area
	Offset uint64 // inside its area
	Size   uint64
	Func   bool
	Global bool
}

// Output is the result of Link.
type Output struct {
	Text, Rodata, Data []byte
	BSS                uint64
	Symbols            []Symbol // sorted by area, offset, name
	// AbsSlots are the link-time addresses of 64-bit words holding absolute addresses
	// (function pointers in initialised data). The runtime adds the load bias to each at
	// start-up, so the rewritten binary needs no dynamic relocations.
	AbsSlots []uint64
	bases    Bases
	byName   map[string]int
}

// Addr returns the link-time address of the global symbol name.
func (o *Output) Addr(name string) (uint64, bool) {
	i, ok := o.byName[name]
	if !ok {
		return 0, false
	}
	s := o.Symbols[i]
	return o.bases.of(s.Area) + s.Offset, true
}

type defn struct {
	obj *Object
	sym *symbol
}

// Linker places the sections of a set of objects into the output areas. Sizes are known
// after New, so the caller can plan addresses before Link.
type Linker struct {
	objs    []*Object
	sizes   Sizes
	globals map[string]defn
	commons map[string]uint64 // name -> offset in bss
}

// New lays out objs in order and checks their global symbols.
func New(objs ...*Object) (*Linker, error) {
	l := &Linker{objs: objs, globals: map[string]defn{}, commons: map[string]uint64{}}
	offs := map[Area]*uint64{AreaText: &l.sizes.Text, AreaRodata: &l.sizes.Rodata, AreaData: &l.sizes.Data, AreaBSS: &l.sizes.BSS}
	for _, o := range objs {
		for _, s := range o.sections {
			if s.area == AreaNone {
				continue
			}
			p := offs[s.area]
			*p = align.Up(*p, s.align)
			s.offset = *p
			*p += s.size
		}
	}
	var commonNames []string
	for _, o := range objs {
		for i := range o.symbols {
			sym := &o.symbols[i]
			if sym.bind == elf.STB_LOCAL || sym.name == "" || sym.shndx == uint16(elf.SHN_UNDEF) {
				continue
			}
			if sym.shndx == uint16(elf.SHN_COMMON) {
				if _, ok := l.commons[sym.name]; !ok {
					l.commons[sym.name] = 0
					commonNames = append(commonNames, sym.name)
				}
				continue
			}
			prev, dup := l.globals[sym.name]
			switch {
			case !dup:
				l.globals[sym.name] = defn{o, sym}
			case prev.sym.bind == elf.STB_WEAK && sym.bind == elf.STB_GLOBAL:
				l.globals[sym.name] = defn{o, sym}
			case sym.bind == elf.STB_WEAK:
			default:
				return nil, fmt.Errorf("symbol %s defined in both %s and %s", sym.name, prev.obj.Name, o.Name)
			}
		}
	}
	// Common symbols not defined elsewhere get zeroed space in bss, in a fixed order.
	for _, name := range commonNames {
		if _, ok := l.globals[name]; ok {
			delete(l.commons, name)
			continue
		}
		var size, commonAlign uint64 = 0, 1
		for _, o := range l.objs {
			for _, sym := range o.symbols {
				if sym.name == name && sym.shndx == uint16(elf.SHN_COMMON) {
					size = max(size, sym.size)
					commonAlign = max(commonAlign, sym.value)
				}
			}
		}
		l.sizes.BSS = align.Up(l.sizes.BSS, commonAlign)
		l.commons[name] = l.sizes.BSS
		l.sizes.BSS += size
	}
	return l, nil
}

// Sizes returns the size of each output area.
func (l *Linker) Sizes() Sizes { return l.sizes }

// Link resolves symbols and applies relocations for the given area addresses. extern
// resolves symbols that no object defines (tables the rewriter generates).
func (l *Linker) Link(b Bases, extern func(name string) (uint64, bool)) (*Output, error) {
	out := &Output{
		Text:   make([]byte, l.sizes.Text),
		Rodata: make([]byte, l.sizes.Rodata),
		Data:   make([]byte, l.sizes.Data),
		BSS:    l.sizes.BSS,
		bases:  b,
		byName: map[string]int{},
	}
	buf := func(a Area) []byte {
		switch a {
		case AreaText:
			return out.Text
		case AreaRodata:
			return out.Rodata
		case AreaData:
			return out.Data
		}
		return nil
	}
	for _, o := range l.objs {
		for _, s := range o.sections {
			if s.area != AreaNone && s.data != nil {
				copy(buf(s.area)[s.offset:], s.data)
			}
		}
	}
	symAddr := func(o *Object, sym *symbol) (uint64, error) {
		switch {
		case sym.shndx == uint16(elf.SHN_ABS):
			return sym.value, nil
		case sym.shndx == uint16(elf.SHN_COMMON):
			return b.BSS + l.commons[sym.name], nil
		case sym.shndx != uint16(elf.SHN_UNDEF) && sym.shndx < uint16(elf.SHN_LORESERVE):
			s := o.sections[sym.shndx]
			if s.area == AreaNone {
				return 0, fmt.Errorf("symbol %q is in section %s, which is not loaded", sym.name, s.name)
			}
			return b.of(s.area) + s.offset + sym.value, nil
		case sym.shndx == uint16(elf.SHN_UNDEF):
			if d, ok := l.globals[sym.name]; ok {
				if d.sym.shndx == uint16(elf.SHN_UNDEF) {
					break
				}
				return symAddrDefined(l, b, d)
			}
			if off, ok := l.commons[sym.name]; ok {
				return b.BSS + off, nil
			}
			if extern != nil {
				if a, ok := extern(sym.name); ok {
					return a, nil
				}
			}
			return 0, fmt.Errorf("undefined symbol %s", sym.name)
		}
		return 0, fmt.Errorf("symbol %q has unsupported section index %#x", sym.name, sym.shndx)
	}
	le := binary.LittleEndian
	for _, o := range l.objs {
		for _, s := range o.sections {
			if s.area == AreaNone || len(s.rela) == 0 {
				continue
			}
			if s.data == nil {
				return nil, fmt.Errorf("%s: section %s has relocations but no bytes", o.Name, s.name)
			}
			data := buf(s.area)[s.offset : s.offset+s.size]
			for _, r := range s.rela {
				where := fmt.Sprintf("%s: %s+%#x", o.Name, s.name, r.off)
				sym := &o.symbols[r.sym]
				S, err := symAddr(o, sym)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", where, err)
				}
				P := b.of(s.area) + s.offset + r.off
				A := r.addend
				pcrel := int64(S) + A - int64(P)
				switch r.typ {
				case elf.R_X86_64_NONE:
				case elf.R_X86_64_PC32, elf.R_X86_64_PLT32:
					if pcrel != int64(int32(pcrel)) {
						return nil, fmt.Errorf("%s: PC-relative reference to %s out of 32-bit range", where, symName(o, sym))
					}
					le.PutUint32(data[r.off:], uint32(int32(pcrel)))
				case elf.R_X86_64_PC64:
					if r.off+8 > s.size {
						return nil, fmt.Errorf("%s: relocation runs past the section", where)
					}
					le.PutUint64(data[r.off:], uint64(pcrel))
				case elf.R_X86_64_GOTPCREL, elf.R_X86_64_GOTPCRELX, elf.R_X86_64_REX_GOTPCRELX:
					if err := relaxGOT(data, r.off, pcrel); err != nil {
						return nil, fmt.Errorf("%s: reference to %s: %w", where, symName(o, sym), err)
					}
				case elf.R_X86_64_64:
					if s.area != AreaData {
						return nil, fmt.Errorf("%s: absolute address of %s in %s (only writable data may hold absolute addresses)", where, symName(o, sym), s.area)
					}
					if r.off+8 > s.size {
						return nil, fmt.Errorf("%s: relocation runs past the section", where)
					}
					le.PutUint64(data[r.off:], uint64(int64(S)+A))
					out.AbsSlots = append(out.AbsSlots, P)
				default:
					return nil, fmt.Errorf("%s: relocation type %v against %s is not supported (compile as position-independent code)", where, r.typ, symName(o, sym))
				}
			}
		}
	}
	sort.Slice(out.AbsSlots, func(i, j int) bool { return out.AbsSlots[i] < out.AbsSlots[j] })
	l.collectSymbols(out)
	return out, nil
}

func symAddrDefined(l *Linker, b Bases, d defn) (uint64, error) {
	s := d.obj.sections[d.sym.shndx]
	if d.sym.shndx == uint16(elf.SHN_ABS) {
		return d.sym.value, nil
	}
	if s.area == AreaNone {
		return 0, fmt.Errorf("symbol %q is in section %s, which is not loaded", d.sym.name, s.name)
	}
	return b.of(s.area) + s.offset + d.sym.value, nil
}

func symName(o *Object, sym *symbol) string {
	if sym.typ == elf.STT_SECTION && int(sym.shndx) < len(o.sections) {
		return "section " + o.sections[sym.shndx].name
	}
	return sym.name
}

// relaxGOT turns a GOT-indirect reference into a direct one, as ld does for symbols
// defined in the output: mov foo@GOTPCREL(%rip) becomes lea, call/jmp *foo@GOTPCREL(%rip)
// become direct. There is no GOT, so any other use is an error.
func relaxGOT(data []byte, off uint64, pcrel int64) error {
	if off < 2 {
		return fmt.Errorf("GOT-relative reference at the start of a section")
	}
	if pcrel != int64(int32(pcrel)) {
		return fmt.Errorf("out of 32-bit range")
	}
	le := binary.LittleEndian
	modrm := data[off-1]
	op := data[off-2]
	if modrm&0xc7 != 0x05 {
		return fmt.Errorf("GOT-relative operand is not RIP-relative")
	}
	switch {
	case op == 0x8b: // mov disp(%rip), %reg -> lea disp(%rip), %reg
		data[off-2] = 0x8d
		le.PutUint32(data[off:], uint32(int32(pcrel)))
	case op == 0xff && modrm == 0x15: // call *disp(%rip) -> addr32 call rel32
		data[off-2], data[off-1] = 0x67, 0xe8
		le.PutUint32(data[off:], uint32(int32(pcrel)))
	case op == 0xff && modrm == 0x25: // jmp *disp(%rip) -> jmp rel32; nop
		rel := pcrel + 1 // rel32 now starts one byte earlier and the instruction ends one byte earlier
		if rel > math.MaxInt32 {
			return fmt.Errorf("out of 32-bit range")
		}
		data[off-2] = 0xe9
		le.PutUint32(data[off-1:], uint32(int32(rel)))
		data[off+3] = 0x90
	default:
		return fmt.Errorf("GOT-relative use by opcode %#x cannot be relaxed (there is no GOT)", op)
	}
	return nil
}

func (l *Linker) collectSymbols(out *Output) {
	for _, o := range l.objs {
		for i := range o.symbols {
			sym := &o.symbols[i]
			if sym.name == "" || sym.shndx == uint16(elf.SHN_UNDEF) || sym.shndx >= uint16(elf.SHN_LORESERVE) {
				continue
			}
			if sym.typ != elf.STT_FUNC && sym.typ != elf.STT_OBJECT && sym.typ != elf.STT_NOTYPE {
				continue
			}
			s := o.sections[sym.shndx]
			if s.area == AreaNone {
				continue
			}
			global := sym.bind != elf.STB_LOCAL
			if global {
				if d := l.globals[sym.name]; d.sym != sym {
					continue // a weak definition that lost
				}
			}
			out.Symbols = append(out.Symbols, Symbol{Name: sym.name, Area: s.area, Offset: s.offset + sym.value, Size: sym.size, Func: sym.typ == elf.STT_FUNC, Global: global})
		}
	}
	for name, off := range l.commons {
		out.Symbols = append(out.Symbols, Symbol{Name: name, Area: AreaBSS, Offset: off, Global: true})
	}
	sort.Slice(out.Symbols, func(i, j int) bool {
		a, b := out.Symbols[i], out.Symbols[j]
		if a.Area != b.Area {
			return a.Area < b.Area
		}
		if a.Offset != b.Offset {
			return a.Offset < b.Offset
		}
		return a.Name < b.Name
	})
	for i, s := range out.Symbols {
		if s.Global {
			out.byName[s.Name] = i
		}
	}
}
