package elfio

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"sort"
	"strings"

	"github.com/kprewrite/kprewrite/internal/align"
	"github.com/kprewrite/kprewrite/internal/mmapfile"
)

// NewSymbol is a symbol for the new code or data, written to .symtab so that objdump,
// gdb and perf name it. Its value is the section's address plus Offset.
type NewSymbol struct {
	Name    string
	Section string // SecText, SecRodata, SecData or SecBSS
	Offset  uint64 // from the start of Section
	Size    uint64
	Func    bool // STT_FUNC, else STT_OBJECT
	Global  bool // STB_GLOBAL, else STB_LOCAL
}

// Patch replaces len(Bytes) bytes of the existing program at virtual address Addr. The
// bytes must be file-backed bytes of one existing PT_LOAD segment.
type Patch struct {
	Addr  uint64
	Bytes []byte
}

// Addition is everything Rewrite adds to or changes in a file.
type Addition struct {
	Layout Layout // from PlanLayout on the same file

	Text, Rodata, Data []byte // contents of the new areas, each at most its Layout size
	BSS                uint64 // zeroed bytes used in .kprewrite.bss, at most Layout.BSSSize
	// EHFrameHdr is the new .eh_frame_hdr (Layout.EHHdrSize > 0 only; at most that
	// size): PT_GNU_EH_FRAME and the .eh_frame_hdr section get its address and length.
	EHFrameHdr []byte

	Symbols []NewSymbol
	Patches []Patch // must not overlap each other

	Entry *uint64 // new e_entry (link-time address), or nil to keep it
}

// Rewrite returns a new image of the file with the Addition applied: the new areas in
// new PT_LOAD segments, the program header table moved into the new read-only segment
// (PT_PHDR updated), section headers for the new areas, the new symbols in .symtab
// (created for stripped input), the patches applied and e_entry redirected. Every
// existing section and program header stays. f is not modified, and the same input
// always gives the same bytes.
func (f *File) Rewrite(a *Addition) (*Output, error) {
	out, err := f.rewrite(a)
	if err != nil {
		return nil, fmt.Errorf("%s: rewrite: %w", f.Path, err)
	}
	return out, nil
}

// filePatch is a Patch resolved to a file offset.
type filePatch struct {
	off  uint64
	addr uint64
	b    []byte
}

// strtab is a string table that keeps its old bytes and gains new strings at its end,
// so every existing offset into it stays valid.
type strtab struct {
	old []byte
	add []byte
}

func newStrtab(old []byte) *strtab {
	t := &strtab{old: old}
	if len(old) == 0 || old[len(old)-1] != 0 {
		t.add = append(t.add, 0)
	}
	return t
}

func (t *strtab) size() uint64 { return uint64(len(t.old) + len(t.add)) }

func (t *strtab) intern(s string) uint32 {
	off := t.size()
	t.add = append(t.add, s...)
	t.add = append(t.add, 0)
	return uint32(off)
}

// putAt places the table at file offset off of the output.
func (t *strtab) putAt(ob *outputBuilder, off uint64) {
	ob.put(off, t.old)
	ob.put(off+uint64(len(t.old)), t.add)
}

// shdr is a section header as written.
type shdr struct {
	name               uint32
	typ                elf.SectionType
	flags              elf.SectionFlag
	addr, off, size    uint64
	link, info         uint32
	addralign, entsize uint64
	nameStr            string // resolved into name when the name table is built
	keepName           bool   // existing section: name is already an offset
}

func (h *shdr) put(dst []byte) {
	putStruct(dst, &elf.Section64{Name: h.name, Type: uint32(h.typ), Flags: uint64(h.flags), Addr: h.addr, Off: h.off, Size: h.size,
		Link: h.link, Info: h.info, Addralign: h.addralign, Entsize: h.entsize})
}

// putStruct encodes v, an ELF header structure of debug/elf, at the start of dst.
func putStruct(dst []byte, v any) {
	if _, err := binary.Encode(dst, binary.LittleEndian, v); err != nil {
		panic(fmt.Sprintf("elfio: encode %T: %v", v, err)) // dst is sized for it by construction
	}
}

// getStruct decodes v from the start of src.
func getStruct(src []byte, v any) {
	if _, err := binary.Decode(src, binary.LittleEndian, v); err != nil {
		panic(fmt.Sprintf("elfio: decode %T: %v", v, err))
	}
}

// imageWriter is one Rewrite on its way: the output's section headers, symbol and
// string tables and the file offsets of the tables moved to the end, then the bytes.
type imageWriter struct {
	f    *File
	a    *Addition
	l    Layout
	tabs tables

	secs     []shdr
	secIndex map[string]int // the new sections by name

	symtab, strtabIdx int
	oldSyms           []byte
	oldInfo           uint64 // the first global symbol of the input
	shstr, symstr     *strtab
	locals, globals   []byte // the new symbols' entries
	nLocal            uint64

	symOff, symSize, symstrOff, shstrOff, shOff, total uint64
	relOffs                                            []uint64
}

func (f *File) rewrite(a *Addition) (*Output, error) {
	if err := f.checkAddition(a); err != nil {
		return nil, err
	}
	patches, err := f.resolvePatches(a.Patches)
	if err != nil {
		return nil, err
	}
	tabs, err := f.planTables()
	if err != nil {
		return nil, err
	}
	w := &imageWriter{f: f, a: a, l: a.Layout, tabs: tabs, secIndex: map[string]int{}}
	w.sectionHeaders()
	if err := w.symbolTables(); err != nil {
		return nil, err
	}
	if err := w.layoutTail(); err != nil {
		return nil, err
	}
	ob := &outputBuilder{base: f.Data[:w.l.keep]}
	if f.mapped {
		ob.release = mmapfile.Release
	}
	for _, p := range patches {
		ob.put(p.off, p.b)
	}
	w.putProgramHeaders(ob)
	w.putAreas(ob)
	w.putTables(ob)
	w.putELFHeader(ob)
	return ob.build(w.total)
}

// checkAddition refuses an addition that was not planned for this file: another
// layout, contents larger than planned, an entry point outside code.
func (f *File) checkAddition(a *Addition) error {
	if a == nil {
		return fmt.Errorf("no addition")
	}
	l := a.Layout
	want, err := f.planLayout(l.TextSize, l.RodataSize, l.DataSize, l.BSSSize, l.EHHdrSize)
	if err != nil {
		return err
	}
	if want != l {
		return fmt.Errorf("layout was not planned for this file (PlanLayout gives text at %#x, layout says %#x)", want.TextAddr, l.TextAddr)
	}
	for _, c := range []struct {
		name string
		n, c uint64
	}{{SecText, uint64(len(a.Text)), l.TextSize}, {SecRodata, uint64(len(a.Rodata)), l.RodataSize},
		{SecData, uint64(len(a.Data)), l.DataSize}, {SecBSS, a.BSS, l.BSSSize}, {secEHHdr, uint64(len(a.EHFrameHdr)), l.EHHdrSize}} {
		if c.n > c.c {
			return fmt.Errorf("%s: %d bytes do not fit in the %d planned", c.name, c.n, c.c)
		}
	}
	if l.EHHdrSize > 0 && len(a.EHFrameHdr) == 0 {
		return fmt.Errorf("%s: planned but empty", secEHHdr)
	}
	if a.Entry != nil {
		e := *a.Entry
		inText := l.TextSize > 0 && e >= l.TextAddr && e-l.TextAddr < uint64(len(a.Text))
		if !inText && !f.ExecAddr(e) {
			return fmt.Errorf("new entry point %#x is not in executable code", e)
		}
	}
	return nil
}

// addSec appends a new section header.
func (w *imageWriter) addSec(h shdr) int {
	w.secs = append(w.secs, h)
	w.secIndex[h.nameStr] = len(w.secs) - 1
	return len(w.secs) - 1
}

// sectionHeaders lists every existing section header, then the new areas'; the old
// .eh_frame_hdr's header describes the new one when there is one.
func (w *imageWriter) sectionHeaders() {
	f, l := w.f, w.l
	w.secs = make([]shdr, 0, len(f.Sections)+8)
	for _, s := range f.Sections {
		w.secs = append(w.secs, shdr{name: s.NameOff, typ: s.Type, flags: s.Flags, addr: s.Addr, off: s.Off, size: s.Size,
			link: s.Link, info: s.Info, addralign: s.Addralign, entsize: s.Entsize, keepName: true})
	}
	if len(w.secs) == 0 {
		w.secs = append(w.secs, shdr{keepName: true})
	}
	if w.tabs.shstrtab < 0 {
		for i := range w.secs {
			w.secs[i].name = 0 // there was no name table to point into
		}
	}
	d := l.delta()
	if l.RodataSize > 0 {
		w.addSec(shdr{nameStr: SecRodata, typ: elf.SHT_PROGBITS, flags: elf.SHF_ALLOC, addr: l.RodataAddr, off: l.RodataAddr - d, size: l.RodataSize, addralign: 64})
	}
	if l.TextSize > 0 {
		w.addSec(shdr{nameStr: SecText, typ: elf.SHT_PROGBITS, flags: elf.SHF_ALLOC | elf.SHF_EXECINSTR, addr: l.TextAddr, off: l.TextAddr - d, size: l.TextSize, addralign: 16})
	}
	if l.DataSize > 0 {
		w.addSec(shdr{nameStr: SecData, typ: elf.SHT_PROGBITS, flags: elf.SHF_ALLOC | elf.SHF_WRITE, addr: l.DataAddr, off: l.DataAddr - d, size: l.DataSize, addralign: 64})
	}
	w.ehFrameHdrSection()
	if l.BSSSize > 0 {
		w.addSec(shdr{nameStr: SecBSS, typ: elf.SHT_NOBITS, flags: elf.SHF_ALLOC | elf.SHF_WRITE, addr: l.BSSAddr, off: l.BSSAddr - d, size: l.BSSSize, addralign: 64})
	}
}

// ehFrameHdrSection points the section PT_GNU_EH_FRAME names at the new
// .eh_frame_hdr (its old bytes stay, unreferenced), or adds one.
func (w *imageWriter) ehFrameHdrSection() {
	l, size := w.l, uint64(len(w.a.EHFrameHdr))
	if size == 0 {
		return
	}
	d := l.delta()
	found := false
	for i := range w.secs {
		if i < len(w.f.Sections) && w.f.Sections[i].Name == secEHHdr && w.secs[i].flags&elf.SHF_ALLOC != 0 {
			w.secs[i].addr, w.secs[i].off, w.secs[i].size = l.EHHdrAddr, l.EHHdrAddr-d, size
			w.secs[i].typ, w.secs[i].addralign = elf.SHT_PROGBITS, 4
			found = true
		}
	}
	if !found {
		w.addSec(shdr{nameStr: secEHHdr, typ: elf.SHT_PROGBITS, flags: elf.SHF_ALLOC, addr: l.EHHdrAddr, off: l.EHHdrAddr - d, size: size, addralign: 4})
	}
}

// symbolTables prepares the symbol table (old locals, new locals, old globals, new
// globals) and the string tables, which keep their old bytes and gain the new names.
func (w *imageWriter) symbolTables() error {
	f, tabs := w.f, &w.tabs
	w.symtab, w.strtabIdx = tabs.symtab, tabs.strtab
	w.oldInfo = 1
	if w.symtab >= 0 {
		s := f.Sections[w.symtab]
		w.oldSyms = f.Data[s.Off:][:s.Size/24*24]
		w.oldInfo = max(uint64(s.Info), 1) // the null symbol is always local
	}
	if len(w.oldSyms) == 0 {
		w.oldSyms = make([]byte, 24) // the null symbol
		w.oldInfo = 1
	}
	w.stringTables()
	if w.symtab < 0 {
		w.strtabIdx = w.addSec(shdr{nameStr: ".strtab", typ: elf.SHT_STRTAB, addralign: 1})
		w.symtab = w.addSec(shdr{nameStr: ".symtab", typ: elf.SHT_SYMTAB, link: uint32(w.strtabIdx), addralign: 8, entsize: 24})
	}
	if tabs.shstrtab < 0 {
		tabs.shstrtab = w.addSec(shdr{nameStr: ".shstrtab", typ: elf.SHT_STRTAB, addralign: 1})
	}
	if len(w.secs) >= int(elf.SHN_LORESERVE) {
		// Extended section numbering (and SHT_SYMTAB_SHNDX for new symbols) is not written.
		return fmt.Errorf("%d sections: too many (extended section numbering is not supported)", len(w.secs))
	}
	for i, ns := range w.a.Symbols {
		e, err := f.newSymbolEntry(i, ns, &w.l, w.secIndex, w.symstr)
		if err != nil {
			return err
		}
		if ns.Global {
			w.globals = append(w.globals, e...)
		} else {
			w.locals = append(w.locals, e...)
		}
	}
	w.nLocal = uint64(len(w.locals) / 24)
	for i := range w.secs {
		if !w.secs[i].keepName {
			w.secs[i].name = w.shstr.intern(w.secs[i].nameStr)
		}
	}
	return nil
}

// stringTables opens the section-name and symbol-name tables (one table when the
// input shares them).
func (w *imageWriter) stringTables() {
	f := w.f
	if w.tabs.shstrtab >= 0 {
		s := f.Sections[w.tabs.shstrtab]
		w.shstr = newStrtab(f.Data[s.Off:][:s.Size])
	} else {
		w.shstr = newStrtab(nil)
	}
	switch {
	case w.strtabIdx >= 0 && w.strtabIdx == w.tabs.shstrtab:
		w.symstr = w.shstr
	case w.strtabIdx >= 0:
		s := f.Sections[w.strtabIdx]
		w.symstr = newStrtab(f.Data[s.Off:][:s.Size])
	default:
		w.symstr = newStrtab(nil)
	}
}

// layoutTail places the tables at the end of the file, then the section header table.
func (w *imageWriter) layoutTail() error {
	f, secs, tabs := w.f, w.secs, &w.tabs
	pos := w.l.fileEnd()
	place := func(size, a uint64) uint64 {
		pos = align.Up(pos, a)
		off := pos
		pos += size
		return off
	}
	w.symSize = uint64(len(w.oldSyms) + len(w.locals) + len(w.globals))
	w.symOff = place(w.symSize, 8)
	secs[w.symtab].off, secs[w.symtab].size = w.symOff, w.symSize
	secs[w.symtab].info = uint32(w.oldInfo + w.nLocal)
	secs[w.symtab].entsize = 24
	if w.symstr != w.shstr {
		w.symstrOff = place(w.symstr.size(), 1)
		secs[w.strtabIdx].off, secs[w.strtabIdx].size = w.symstrOff, w.symstr.size()
	}
	w.relOffs = make([]uint64, len(tabs.rels))
	for j, i := range tabs.rels {
		w.relOffs[j] = place(f.Sections[i].Size, 8)
		secs[i].off = w.relOffs[j]
	}
	for _, i := range tabs.groups {
		if uint64(secs[i].info) >= w.oldInfo {
			secs[i].info += uint32(w.nLocal)
		}
	}
	w.shstrOff = place(w.shstr.size(), 1)
	secs[tabs.shstrtab].off, secs[tabs.shstrtab].size = w.shstrOff, w.shstr.size()
	if w.symstr == w.shstr {
		secs[w.strtabIdx].off, secs[w.strtabIdx].size = w.shstrOff, w.shstr.size()
	}
	w.shOff = place(uint64(len(secs))*64, 8)
	w.total = pos
	if w.total > 1<<40 {
		return fmt.Errorf("output would be %d bytes", w.total)
	}
	return nil
}

// putProgramHeaders writes the program header table: the old entries, the new
// PT_LOADs right after the last existing PT_LOAD (keeping PT_LOADs in ascending
// address order), PT_PHDR moved, PT_GNU_EH_FRAME pointed at the new .eh_frame_hdr.
func (w *imageWriter) putProgramHeaders(ob *outputBuilder) {
	f, l := w.f, w.l
	ehHdrSize := uint64(len(w.a.EHFrameHdr))
	lastLoad := 0
	for i, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			lastLoad = i
		}
	}
	ph := make([]byte, uint64(l.PhdrNum)*56)
	ob.put(l.PhdrOff, ph)
	n := 0
	put := func(e *elf.Prog64) {
		putStruct(ph[n*56:], e)
		n++
	}
	for i, p := range f.Progs {
		var e elf.Prog64
		getStruct(f.Data[f.Phoff+uint64(i)*56:], &e)
		if p.Type == elf.PT_PHDR {
			size := uint64(l.PhdrNum) * 56
			e.Off, e.Vaddr, e.Paddr, e.Filesz, e.Memsz = l.PhdrOff, l.PhdrAddr, l.PhdrAddr, size, size
		}
		if p.Type == elf.PT_GNU_EH_FRAME && ehHdrSize > 0 {
			setEHFrame(&e, l, ehHdrSize)
		}
		put(&e)
		if i == lastLoad {
			for _, s := range l.segments() {
				align := l.Align
				if s.huge {
					align = max(l.Align, hugePage)
				}
				put(&elf.Prog64{Type: uint32(elf.PT_LOAD), Flags: uint32(s.flags), Off: s.off, Vaddr: s.vaddr, Paddr: s.vaddr,
					Filesz: s.filesz, Memsz: s.memsz, Align: align})
			}
		}
	}
	if l.EHPhdrAdded {
		e := elf.Prog64{Type: uint32(elf.PT_GNU_EH_FRAME), Flags: uint32(elf.PF_R)}
		setEHFrame(&e, l, ehHdrSize)
		put(&e)
	}
}

// putAreas writes the new areas; unused text capacity is int3 so stray execution traps.
func (w *imageWriter) putAreas(ob *outputBuilder) {
	l, a := w.l, w.a
	d := l.delta()
	if l.RodataSize > 0 {
		ob.put(l.RodataAddr-d, a.Rodata)
	}
	if len(a.EHFrameHdr) > 0 {
		ob.put(l.EHHdrAddr-d, a.EHFrameHdr)
	}
	if l.TextSize > 0 {
		ob.put(l.TextAddr-d, a.Text)
		ob.putFill(l.TextAddr-d+uint64(len(a.Text)), l.TextSize-uint64(len(a.Text)), 0xcc)
	}
	if l.DataSize > 0 {
		ob.put(l.DataAddr-d, a.Data)
	}
}

// putTables writes the symbol and string tables, the relocation tables (their symbol
// indexes shifted past the new locals) and the section header table.
func (w *imageWriter) putTables(ob *outputBuilder) {
	f := w.f
	sy := make([]byte, 0, w.symSize)
	sy = append(sy, w.oldSyms[:w.oldInfo*24]...)
	sy = append(sy, w.locals...)
	sy = append(sy, w.oldSyms[w.oldInfo*24:]...)
	sy = append(sy, w.globals...)
	ob.put(w.symOff, sy)
	if w.symstr != w.shstr {
		w.symstr.putAt(ob, w.symstrOff)
	}
	w.shstr.putAt(ob, w.shstrOff)
	for j, i := range w.tabs.rels {
		s := f.Sections[i]
		r := f.Data[s.Off:][:s.Size]
		if w.nLocal > 0 {
			r = bytes.Clone(r)
			renumberRelocs(r, s.Type == elf.SHT_RELA, w.oldInfo, w.nLocal)
		}
		ob.put(w.relOffs[j], r)
	}
	for _, i := range w.tabs.inPlace {
		if s := f.Sections[i]; w.nLocal > 0 {
			r := bytes.Clone(f.Data[s.Off:][:s.Size])
			renumberRelocs(r, s.Type == elf.SHT_RELA, w.oldInfo, w.nLocal)
			ob.put(s.Off, r)
		}
	}
	sh := make([]byte, len(w.secs)*64)
	for i := range w.secs {
		w.secs[i].put(sh[i*64:][:64])
	}
	ob.put(w.shOff, sh)
}

// putELFHeader writes the ELF header: the new entry point and the moved tables.
func (w *imageWriter) putELFHeader(ob *outputBuilder) {
	var hdr elf.Header64
	getStruct(w.f.Data, &hdr)
	if w.a.Entry != nil {
		hdr.Entry = *w.a.Entry
	}
	hdr.Phoff, hdr.Shoff = w.l.PhdrOff, w.shOff
	hdr.Phnum = uint16(w.l.PhdrNum)
	hdr.Shentsize = 64              // zero in input without sections
	hdr.Shnum = uint16(len(w.secs)) // < SHN_LORESERVE, checked in symbolTables
	hdr.Shstrndx = uint16(w.tabs.shstrtab)
	eh := make([]byte, 64)
	putStruct(eh, &hdr)
	ob.put(0, eh)
}

// secEHHdr is the section PT_GNU_EH_FRAME names.
const secEHHdr = ".eh_frame_hdr"

// setEHFrame points the PT_GNU_EH_FRAME entry e at the new .eh_frame_hdr.
func setEHFrame(e *elf.Prog64, l Layout, size uint64) {
	e.Off, e.Vaddr, e.Paddr = l.EHHdrAddr-l.delta(), l.EHHdrAddr, l.EHHdrAddr
	e.Filesz, e.Memsz, e.Align = size, size, 4
}

// newSymbolEntry validates ns and encodes its Elf64_Sym.
func (f *File) newSymbolEntry(i int, ns NewSymbol, l *Layout, secIndex map[string]int, names *strtab) ([]byte, error) {
	if ns.Name == "" || strings.IndexByte(ns.Name, 0) >= 0 {
		return nil, fmt.Errorf("new symbol %d: name %q is empty or has a NUL byte", i, ns.Name)
	}
	var addr, size uint64
	switch ns.Section {
	case SecText:
		addr, size = l.TextAddr, l.TextSize
	case SecRodata:
		addr, size = l.RodataAddr, l.RodataSize
	case SecData:
		addr, size = l.DataAddr, l.DataSize
	case SecBSS:
		addr, size = l.BSSAddr, l.BSSSize
	default:
		return nil, fmt.Errorf("new symbol %s: unknown section %q", ns.Name, ns.Section)
	}
	idx, ok := secIndex[ns.Section]
	if !ok || size == 0 {
		return nil, fmt.Errorf("new symbol %s: section %s has no space planned", ns.Name, ns.Section)
	}
	if ns.Offset > size || ns.Size > size-ns.Offset {
		return nil, fmt.Errorf("new symbol %s: %#x+%#x runs past the end of %s (%#x bytes)", ns.Name, ns.Offset, ns.Size, ns.Section, size)
	}
	typ, bind := elf.STT_OBJECT, elf.STB_LOCAL
	if ns.Func {
		typ = elf.STT_FUNC
	}
	if ns.Global {
		bind = elf.STB_GLOBAL
	}
	e := make([]byte, 24)
	putStruct(e, &elf.Sym64{Name: names.intern(ns.Name), Info: elf.ST_INFO(bind, typ), Other: byte(elf.STV_DEFAULT),
		Shndx: uint16(idx), Value: addr + ns.Offset, Size: ns.Size})
	return e, nil
}

// resolvePatches maps patches to file offsets and checks they are file-backed bytes of
// existing PT_LOADs, clear of the ELF header, and do not overlap.
func (f *File) resolvePatches(ps []Patch) ([]filePatch, error) {
	out := make([]filePatch, 0, len(ps))
	for _, p := range ps {
		if len(p.Bytes) == 0 {
			return nil, fmt.Errorf("patch at %#x is empty", p.Addr)
		}
		off, err := f.FileOffset(p.Addr, uint64(len(p.Bytes)))
		if err != nil {
			return nil, fmt.Errorf("patch at %#x (%d bytes): %w", p.Addr, len(p.Bytes), err)
		}
		if off < 64 {
			return nil, fmt.Errorf("patch at %#x (%d bytes) overlaps the ELF header", p.Addr, len(p.Bytes))
		}
		out = append(out, filePatch{off: off, addr: p.Addr, b: p.Bytes})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].off < out[j].off })
	for i := 1; i < len(out); i++ {
		if prev := out[i-1]; prev.off+uint64(len(prev.b)) > out[i].off {
			return nil, fmt.Errorf("patches at %#x (%d bytes) and %#x overlap", prev.addr, len(prev.b), out[i].addr)
		}
	}
	return out, nil
}

// renumberRelocs shifts symbol indices at or past first by n in a REL/RELA table.
func renumberRelocs(r []byte, rela bool, first, n uint64) {
	ent := 16
	if rela {
		ent = 24
	}
	le := binary.LittleEndian
	for i := 0; i+ent <= len(r); i += ent {
		info := le.Uint64(r[i+8:])
		if sym := info >> 32; sym >= first {
			le.PutUint64(r[i+8:], (sym+n)<<32|info&0xffffffff)
		}
	}
}
