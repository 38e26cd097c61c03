package objlink

import "debug/elf"

// Func is a function an object defines in a loaded executable section: its bytes and
// where they are, for analyses of the code before it is linked (internal/stackuse).
type Func struct {
	Name    string
	Local   bool
	Section int    // index of its section
	Offset  uint64 // where it starts in its section
	Code    []byte // its bytes (Size bytes from Offset)
}

// Ref is one relocation of a loaded section: a place that refers to a symbol.
type Ref struct {
	Section int    // the section holding the place
	Offset  uint64 // the place, in its section
	Type    elf.R_X86_64
	Addend  int64
	// What the place refers to: a named symbol (Name; Func when it is a function,
	// Defined when this object defines it, Local when only this object sees it), or a place in a section (Name empty,
	// TargetSection >= 0, TargetOffset = the section symbol's value; the addend says
	// where in it).
	Name                 string
	Func, Defined, Local bool
	TargetSection        int
	TargetOffset         uint64
}

// Funcs lists the functions the object defines in executable sections, in symbol table
// order. A function whose size runs past its section is cut at the section's end.
func (o *Object) Funcs() []Func {
	var out []Func
	for _, s := range o.symbols {
		if s.typ != elf.STT_FUNC || s.shndx == uint16(elf.SHN_UNDEF) || int(s.shndx) >= len(o.sections) {
			continue
		}
		sec := o.sections[s.shndx]
		if sec == nil || sec.area != AreaText || s.value > uint64(len(sec.data)) {
			continue
		}
		end := min(s.value+s.size, uint64(len(sec.data)))
		out = append(out, Func{Name: s.name, Local: s.bind == elf.STB_LOCAL, Section: int(s.shndx), Offset: s.value, Code: sec.data[s.value:end:end]})
	}
	return out
}

// Refs lists the relocations of the loaded sections (text, data, rodata), section by
// section in offset order as the object holds them.
func (o *Object) Refs() []Ref {
	var out []Ref
	for i, sec := range o.sections {
		if sec == nil {
			continue
		}
		for _, r := range sec.rela {
			sym := o.symbols[r.sym]
			ref := Ref{Section: i, Offset: r.off, Type: r.typ, Addend: r.addend, TargetSection: -1}
			defined := sym.shndx != uint16(elf.SHN_UNDEF) && sym.shndx < uint16(elf.SHN_LORESERVE)
			if sym.typ == elf.STT_SECTION {
				if defined {
					ref.TargetSection, ref.TargetOffset = int(sym.shndx), sym.value
				}
			} else {
				ref.Name, ref.Func, ref.Defined, ref.Local = sym.name, sym.typ == elf.STT_FUNC, defined, sym.bind == elf.STB_LOCAL
			}
			out = append(out, ref)
		}
	}
	return out
}
