package elfio

import (
	"debug/elf"
	"encoding/binary"
)

// testELF describes a tiny hand-built x86-64 executable whose code is
// `mov edi, 42; mov eax, 60; syscall` (exit(42)). It needs no compiler, so unit tests
// and the fuzz seed corpus stay small and self-contained.
type testELF struct {
	pie      bool   // ET_DYN at address 0, else ET_EXEC at 0x400000
	phdr     bool   // a PT_PHDR entry first
	data     bool   // a second, RW PT_LOAD with 16 bytes of data ...
	bss      uint64 // ... and this much .bss after it
	sections bool   // section headers (.text, .shstrtab)
	symtab   bool   // .symtab/.strtab with a local and a global symbol
	rela     bool   // a non-loaded .rela.text whose symbols are in .symtab (as with --emit-relocs)
	shared   bool   // symbol names live in .shstrtab (no .strtab), as some linkers do
	x86Feat  uint32 // when nonzero, a .note.gnu.property with these X86_FEATURE_1_AND bits
	ehHdr    bool   // a 12-byte .eh_frame_hdr (no table) and its PT_GNU_EH_FRAME
}

var exit42 = []byte{0xbf, 42, 0, 0, 0, 0xb8, 60, 0, 0, 0, 0x0f, 0x05}

const (
	testNoteOff  = 0x180
	testEHHdrOff = 0x1c0
	testCodeOff  = 0x200
	testDataOff  = 0x1000
)

func (o testELF) base() uint64 {
	if o.pie {
		return 0
	}
	return 0x400000
}

func (o testELF) build() []byte {
	le := binary.LittleEndian
	base := o.base()
	nph := 1
	if o.phdr {
		nph++
	}
	if o.data {
		nph++
	}
	if o.x86Feat != 0 {
		nph += 2 // PT_NOTE and PT_GNU_PROPERTY
	}
	if o.ehHdr {
		nph++
	}
	buf := make([]byte, testCodeOff, 0x2000)
	noteSize := uint64(0)
	if o.x86Feat != 0 {
		n := buf[testNoteOff:]
		le.PutUint32(n[0:], 4)
		le.PutUint32(n[4:], 16)
		le.PutUint32(n[8:], 5) // NT_GNU_PROPERTY_TYPE_0
		copy(n[12:], "GNU\x00")
		le.PutUint32(n[16:], 0xc0000002)
		le.PutUint32(n[20:], 4)
		le.PutUint32(n[24:], o.x86Feat)
		noteSize = 32
	}
	if o.ehHdr {
		copy(buf[testEHHdrOff:], []byte{1, 0x1b, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0})
	}
	buf = append(buf, exit42...)
	textEnd := uint64(len(buf))
	if o.data {
		buf = append(buf, make([]byte, testDataOff-len(buf))...)
		buf = append(buf, []byte("kprewrite-data!\x00")...)
	}
	loadedEnd := uint64(len(buf))

	// Non-loaded tables at the end, as linkers put them.
	type sec struct {
		name            string
		typ             elf.SectionType
		flags           elf.SectionFlag
		addr, off, size uint64
		link, info      uint32
		align, entsize  uint64
	}
	secs := []sec{{}}
	var shstr []byte
	shname := map[string]uint32{}
	intern := func(s string) uint32 {
		if len(shstr) == 0 {
			shstr = append(shstr, 0)
		}
		off := uint32(len(shstr))
		shstr = append(shstr, s...)
		shstr = append(shstr, 0)
		return off
	}
	if o.sections {
		secs = append(secs, sec{name: ".text", typ: elf.SHT_PROGBITS, flags: elf.SHF_ALLOC | elf.SHF_EXECINSTR, addr: base + testCodeOff, off: testCodeOff, size: uint64(len(exit42)), align: 16})
		if o.data {
			secs = append(secs, sec{name: ".data", typ: elf.SHT_PROGBITS, flags: elf.SHF_ALLOC | elf.SHF_WRITE, addr: base + testDataOff, off: testDataOff, size: 16, align: 8})
			if o.bss > 0 {
				secs = append(secs, sec{name: ".bss", typ: elf.SHT_NOBITS, flags: elf.SHF_ALLOC | elf.SHF_WRITE, addr: base + testDataOff + 16, off: testDataOff + 16, size: o.bss, align: 8})
			}
		}
		if o.ehHdr {
			secs = append(secs, sec{name: ".eh_frame_hdr", typ: elf.SHT_PROGBITS, flags: elf.SHF_ALLOC, addr: base + testEHHdrOff, off: testEHHdrOff, size: 12, align: 4})
		}
		if o.symtab {
			for len(buf)%8 != 0 {
				buf = append(buf, 0)
			}
			symOff := uint64(len(buf))
			strtab := []byte("\x00local_thing\x00_start\x00")
			sym := func(name uint32, info byte, shndx uint16, value, size uint64) {
				e := make([]byte, 24)
				le.PutUint32(e[0:], name)
				e[4] = info
				le.PutUint16(e[6:], shndx)
				le.PutUint64(e[8:], value)
				le.PutUint64(e[16:], size)
				buf = append(buf, e...)
			}
			sym(0, 0, 0, 0, 0)
			sym(1, elf.ST_INFO(elf.STB_LOCAL, elf.STT_OBJECT), 1, base+testCodeOff+5, 1)
			sym(13, elf.ST_INFO(elf.STB_GLOBAL, elf.STT_FUNC), 1, base+testCodeOff, uint64(len(exit42)))
			symIdx := uint32(len(secs))
			secs = append(secs, sec{name: ".symtab", typ: elf.SHT_SYMTAB, off: symOff, size: 3 * 24, link: symIdx + 1, info: 2, align: 8, entsize: 24})
			if o.shared {
				intern("local_thing") // same offsets as in strtab
				intern("_start")
			} else {
				strOff := uint64(len(buf))
				buf = append(buf, strtab...)
				secs = append(secs, sec{name: ".strtab", typ: elf.SHT_STRTAB, off: strOff, size: uint64(len(strtab)), align: 1})
			}
			if o.rela {
				for len(buf)%8 != 0 {
					buf = append(buf, 0)
				}
				relOff := uint64(len(buf))
				for _, symi := range []uint64{1, 2, 0} {
					e := make([]byte, 24)
					le.PutUint64(e[0:], base+testCodeOff+1)
					le.PutUint64(e[8:], symi<<32|uint64(elf.R_X86_64_32))
					buf = append(buf, e...)
				}
				secs = append(secs, sec{name: ".rela.text", typ: elf.SHT_RELA, flags: elf.SHF_INFO_LINK, off: relOff, size: 3 * 24, link: symIdx, info: 1, align: 8, entsize: 24})
			}
		}
		shIdx := len(secs)
		secs = append(secs, sec{name: ".shstrtab", typ: elf.SHT_STRTAB, align: 1})
		if o.shared {
			for i := range secs {
				if secs[i].typ == elf.SHT_SYMTAB {
					secs[i].link = uint32(shIdx)
				}
			}
		}
		for _, s := range secs[1:] {
			shname[s.name] = intern(s.name)
		}
		secs[shIdx].off, secs[shIdx].size = uint64(len(buf)), uint64(len(shstr))
		buf = append(buf, shstr...)
	}
	shoff := uint64(0)
	if o.sections {
		for len(buf)%8 != 0 {
			buf = append(buf, 0)
		}
		shoff = uint64(len(buf))
		for _, s := range secs {
			e := make([]byte, 64)
			if s.name != "" {
				le.PutUint32(e[0:], shname[s.name])
			}
			le.PutUint32(e[4:], uint32(s.typ))
			le.PutUint64(e[8:], uint64(s.flags))
			le.PutUint64(e[16:], s.addr)
			le.PutUint64(e[24:], s.off)
			le.PutUint64(e[32:], s.size)
			le.PutUint32(e[40:], s.link)
			le.PutUint32(e[44:], s.info)
			le.PutUint64(e[48:], s.align)
			le.PutUint64(e[56:], s.entsize)
			buf = append(buf, e...)
		}
	}

	// ELF header.
	copy(buf, elf.ELFMAG)
	buf[elf.EI_CLASS] = byte(elf.ELFCLASS64)
	buf[elf.EI_DATA] = byte(elf.ELFDATA2LSB)
	buf[elf.EI_VERSION] = byte(elf.EV_CURRENT)
	typ := elf.ET_EXEC
	if o.pie {
		typ = elf.ET_DYN
	}
	le.PutUint16(buf[16:], uint16(typ))
	le.PutUint16(buf[18:], uint16(elf.EM_X86_64))
	le.PutUint32(buf[20:], uint32(elf.EV_CURRENT))
	le.PutUint64(buf[24:], base+testCodeOff)
	le.PutUint64(buf[32:], 64)
	le.PutUint64(buf[40:], shoff)
	le.PutUint16(buf[52:], 64)
	le.PutUint16(buf[54:], 56)
	le.PutUint16(buf[56:], uint16(nph))
	if o.sections {
		le.PutUint16(buf[58:], 64)
		le.PutUint16(buf[60:], uint16(len(secs)))
		le.PutUint16(buf[62:], uint16(len(secs)-1))
	}
	ph := buf[64:]
	putPh := func(typ elf.ProgType, flags elf.ProgFlag, off, vaddr, filesz, memsz, align uint64) {
		le.PutUint32(ph[0:], uint32(typ))
		le.PutUint32(ph[4:], uint32(flags))
		le.PutUint64(ph[8:], off)
		le.PutUint64(ph[16:], vaddr)
		le.PutUint64(ph[24:], vaddr)
		le.PutUint64(ph[32:], filesz)
		le.PutUint64(ph[40:], memsz)
		le.PutUint64(ph[48:], align)
		ph = ph[56:]
	}
	if o.phdr {
		putPh(elf.PT_PHDR, elf.PF_R, 64, base+64, uint64(nph)*56, uint64(nph)*56, 8)
	}
	putPh(elf.PT_LOAD, elf.PF_R|elf.PF_X, 0, base, textEnd, textEnd, 0x1000)
	if o.data {
		putPh(elf.PT_LOAD, elf.PF_R|elf.PF_W, testDataOff, base+testDataOff, loadedEnd-testDataOff, loadedEnd-testDataOff+o.bss, 0x1000)
	}
	if o.x86Feat != 0 {
		putPh(elf.PT_NOTE, elf.PF_R, testNoteOff, base+testNoteOff, noteSize, noteSize, 8)
		putPh(elf.PT_GNU_PROPERTY, elf.PF_R, testNoteOff, base+testNoteOff, noteSize, noteSize, 8)
	}
	if o.ehHdr {
		putPh(elf.PT_GNU_EH_FRAME, elf.PF_R, testEHHdrOff, base+testEHHdrOff, 12, 12, 4)
	}
	return buf
}

// rewriteBytes is f.Rewrite with the image in one buffer.
func rewriteBytes(f *File, a *Addition) ([]byte, error) {
	out, err := f.Rewrite(a)
	if err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}
