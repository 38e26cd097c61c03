package elfio

import (
	"debug/elf"
	"errors"
	"fmt"
	"math/bits"
	"strings"

	"github.com/kprewrite/kprewrite/internal/align"
)

// Names of the sections Rewrite adds. NewSymbol.Section takes one of them.
const (
	SecRodata = ".kprewrite.rodata" // R: probe tables, constants
	SecText   = ".kprewrite.text"   // R-X: detour buffers, slots, trampolines, runtime
	SecData   = ".kprewrite.data"   // RW-: initialised runtime state
	SecBSS    = ".kprewrite.bss"    // RW-: zeroed runtime state (trace buffers, per-thread)
)

// ErrRewritten is returned for input that already carries kprewrite sections: rewrite
// the original binary instead.
var ErrRewritten = errors.New("already rewritten by kprewrite")

const (
	pageSize = 0x1000
	// maxSegAlign bounds the p_align we follow; larger values are not real page sizes.
	maxSegAlign = 1 << 24
	// maxAreaSize bounds each new area; anything larger could not be in rel32 reach.
	maxAreaSize = 1 << 30
	// maxPhdrPad is how much zero padding we accept to keep the new program header
	// table at e_phoff + (first PT_LOAD's p_vaddr - p_offset), where kernels before
	// 5.18 (which compute AT_PHDR that way) look for it.
	maxPhdrPad = 1 << 20
	// rel32Reach is the largest distance a jmp rel32 covers.
	rel32Reach = 1<<31 - 1
	// maxUserAddr is the top of the x86-64 user address space (4-level paging).
	maxUserAddr = 1 << 47
	// hugePage and hugeMin: a new segment of at least hugeMin bytes (the probe tables
	// and detours of a big rewrite) gets whole 2 MiB pages of address space and file,
	// 2 MiB-aligned, so the kernel can map it with one PMD from the large folios a
	// single write of the file leaves in the page cache (Linux 6.x, ext4 and others):
	// start-up then reads the tables without a fault every 64 KiB, and the detours take
	// one TLB entry. The file grows by up to 2 MiB of zeros for each (python3.11 with a
	// probe on every function: 10.6 MB -> 13.1 MB; start-up ~0.02x faster).
	hugePage = 2 << 20
	hugeMin  = 512 << 10
)

// Layout says where the new segments and sections will live. PlanLayout makes it before
// any code is generated, because trampolines encode these addresses. Sizes are
// capacities: Rewrite accepts contents up to them and pads the rest (text with int3,
// data with zeros).
//
// The new segments, in address and file order, are: R (the new program header table,
// then .kprewrite.rodata, then a new .eh_frame_hdr if planned), R-X (.kprewrite.text), RW- (.kprewrite.data, then
// .kprewrite.bss). The R segment always exists; the others only with a nonzero size.
type Layout struct {
	FileOff uint64 // file offset of the first new segment
	Align   uint64 // p_align of the new segments (the largest existing PT_LOAD alignment)

	PhdrAddr, PhdrOff uint64 // the new program header table
	PhdrNum           int

	RodataAddr, RodataSize uint64
	TextAddr, TextSize     uint64
	DataAddr, DataSize     uint64
	BSSAddr, BSSSize       uint64

	// EHHdrAddr, EHHdrSize: the new .eh_frame_hdr (PlanLayoutEH), after .kprewrite.rodata
	// in the R segment; PT_GNU_EH_FRAME and the .eh_frame_hdr section header point at it,
	// and a PT_GNU_EH_FRAME is added when the input has none (EHPhdrAdded).
	EHHdrAddr, EHHdrSize uint64
	EHPhdrAdded          bool

	End uint64 // first address past the new segments

	// PhdrAtOldBias reports that vaddr - offset of the new segments equals that of the
	// first PT_LOAD, so kernels older than 5.18 also find the new program headers.
	PhdrAtOldBias bool

	keep     uint64 // input bytes kept in place; the rest (old symbol and section tables) is dropped
	rEnd     uint64 // with a huge R segment: its end, relative to PhdrOff (else 0: its contents' end)
	hugeText bool   // the R-X segment is on whole 2 MiB pages
}

// newSeg is one PT_LOAD Rewrite adds.
type newSeg struct {
	off, vaddr, filesz, memsz uint64
	flags                     elf.ProgFlag
	huge                      bool // on whole 2 MiB pages: p_align 2 MiB, so a PIE loads at a 2 MiB-aligned bias
}

func (l *Layout) delta() uint64 { return l.PhdrAddr - l.PhdrOff }

// segments returns the new PT_LOADs in address order.
func (l *Layout) segments() []newSeg {
	d := l.delta()
	rEnd := l.PhdrOff + uint64(l.PhdrNum)*56
	if l.RodataSize > 0 {
		rEnd = l.RodataAddr - d + l.RodataSize
	}
	if l.EHHdrSize > 0 {
		rEnd = l.EHHdrAddr - d + l.EHHdrSize
	}
	if l.rEnd > 0 {
		rEnd = l.PhdrOff + l.rEnd
	}
	segs := []newSeg{{off: l.PhdrOff, vaddr: l.PhdrAddr, filesz: rEnd - l.PhdrOff, memsz: rEnd - l.PhdrOff, flags: elf.PF_R, huge: l.rEnd > 0}}
	if l.TextSize > 0 {
		segs = append(segs, newSeg{off: l.TextAddr - d, vaddr: l.TextAddr, filesz: l.TextSize, memsz: l.TextSize, flags: elf.PF_R | elf.PF_X,
			huge: l.hugeText})
	}
	if l.DataSize+l.BSSSize > 0 {
		segs = append(segs, newSeg{off: l.DataAddr - d, vaddr: l.DataAddr, filesz: l.DataSize, memsz: l.End - l.DataAddr, flags: elf.PF_R | elf.PF_W})
	}
	return segs
}

// fileEnd is the first file offset past the new segments' file images.
func (l *Layout) fileEnd() uint64 {
	segs := l.segments()
	last := segs[len(segs)-1]
	return last.off + last.filesz
}

// add returns a+b, or ok=false on overflow.
func add(a, b uint64) (uint64, bool) {
	s, c := bits.Add64(a, b, 0)
	return s, c == 0
}

// PlanLayout decides the addresses and file offsets of the new segments for areas of
// the given sizes: above every existing segment (past .bss), page aligned, with
// p_offset congruent to p_vaddr modulo the existing PT_LOAD alignment, and within jmp
// rel32 reach of every executable segment.
func (f *File) PlanLayout(textSize, rodataSize, dataSize, bssSize uint64) (Layout, error) {
	return f.PlanLayoutEH(textSize, rodataSize, dataSize, bssSize, 0)
}

// PlanLayoutEH is PlanLayout with room for a new .eh_frame_hdr of ehHdrSize bytes (0:
// none) in the read-only segment, 8-byte aligned after .kprewrite.rodata. Rewrite
// points PT_GNU_EH_FRAME (added if the input has none) and the .eh_frame_hdr section
// header (added if none) at it, so the unwinder's search table can cover new code too.
func (f *File) PlanLayoutEH(textSize, rodataSize, dataSize, bssSize, ehHdrSize uint64) (Layout, error) {
	l, err := f.planLayout(textSize, rodataSize, dataSize, bssSize, ehHdrSize)
	if err != nil {
		return Layout{}, fmt.Errorf("%s: plan new segments: %w", f.Path, err)
	}
	return l, nil
}

// HasEHFramePhdr reports whether the file has a PT_GNU_EH_FRAME program header.
func (f *File) HasEHFramePhdr() bool {
	for _, p := range f.Progs {
		if p.Type == elf.PT_GNU_EH_FRAME {
			return true
		}
	}
	return false
}

func (f *File) planLayout(textSize, rodataSize, dataSize, bssSize, ehHdrSize uint64) (Layout, error) {
	loads, segAlign, execMin, haveExec, err := f.layoutInput(textSize, rodataSize, dataSize, bssSize, ehHdrSize)
	if err != nil {
		return Layout{}, err
	}
	tabs, err := f.planTables()
	if err != nil {
		return Layout{}, err
	}
	l := Layout{Align: segAlign, keep: f.keepEnd(tabs)}
	if err := f.countPhdrs(&l, textSize, dataSize, bssSize, ehHdrSize); err != nil {
		return Layout{}, err
	}
	rel := blockOffsets(&l, textSize, rodataSize, dataSize, bssSize, ehHdrSize)
	imageEnd := f.ImageEnd()
	if imageEnd > maxUserAddr {
		return Layout{}, fmt.Errorf("image ends at %#x, above the user address space", imageEnd)
	}
	fileOff, delta := placeBlock(&l, loads[0], align.Up(imageEnd, pageSize), segAlign, rel.huge())
	vbase := fileOff + delta
	vend, ok := add(vbase, rel.end)
	if !ok || vend > maxUserAddr {
		return Layout{}, fmt.Errorf("new segments at %#x+%#x do not fit in the user address space", vbase, rel.end)
	}
	if haveExec && vend-execMin > rel32Reach {
		return Layout{}, fmt.Errorf("new segments would end at %#x, more than 2 GiB past the executable segment at %#x (out of jmp rel32 reach)", vend, execMin)
	}
	l.FileOff = fileOff
	l.PhdrOff, l.PhdrAddr = fileOff, vbase
	rel.assign(&l, vbase, rodataSize, dataSize, bssSize, ehHdrSize)
	l.End = vend
	return l, nil
}

// layoutInput checks what the layout depends on in the input: the areas' sizes, a
// file not rewritten before, loadable segments with sane alignments. It returns the
// PT_LOADs, the largest segment alignment, and the lowest executable address (the
// jmp rel32s from there must reach the new code).
func (f *File) layoutInput(sizes ...uint64) (loads []Prog, segAlign, execMin uint64, haveExec bool, err error) {
	for _, sz := range sizes {
		if sz > maxAreaSize {
			return nil, 0, 0, false, fmt.Errorf("area size %#x is larger than the %#x limit", sz, uint64(maxAreaSize))
		}
	}
	for _, s := range f.Sections {
		if strings.HasPrefix(s.Name, ".kprewrite.") {
			return nil, 0, 0, false, fmt.Errorf("%w (has section %s)", ErrRewritten, s.Name)
		}
	}
	loads = f.Loads()
	if len(loads) == 0 {
		return nil, 0, 0, false, formatErr("no PT_LOAD segments")
	}
	segAlign = uint64(pageSize)
	for _, p := range loads {
		if p.Align > 1 {
			if p.Align&(p.Align-1) != 0 {
				return nil, 0, 0, false, formatErr("segment %d alignment %#x is not a power of two", p.Index, p.Align)
			}
			if p.Align > maxSegAlign {
				return nil, 0, 0, false, fmt.Errorf("segment %d alignment %#x is larger than the supported %#x", p.Index, p.Align, uint64(maxSegAlign))
			}
			segAlign = max(segAlign, p.Align)
		}
		if p.Flags&elf.PF_X != 0 && (!haveExec || p.Vaddr < execMin) {
			execMin, haveExec = p.Vaddr, true
		}
	}
	return loads, segAlign, execMin, haveExec, nil
}

// countPhdrs counts the program headers of the output: the input's, the new read-only
// segment's, and those of new text, data and PT_GNU_EH_FRAME when there are any.
func (f *File) countPhdrs(l *Layout, textSize, dataSize, bssSize, ehHdrSize uint64) error {
	l.PhdrNum = len(f.Progs) + 1
	if ehHdrSize > 0 && !f.HasEHFramePhdr() {
		l.PhdrNum++
		l.EHPhdrAdded = true
	}
	if textSize > 0 {
		l.PhdrNum++
	}
	if dataSize+bssSize > 0 {
		l.PhdrNum++
	}
	if l.PhdrNum >= 0xffff { // PN_XNUM
		return fmt.Errorf("%d program headers do not fit in e_phnum", l.PhdrNum)
	}
	return nil
}

// newBlock holds the new areas' offsets from the start of the new block.
type newBlock struct {
	rodata, eh, text, data, bss uint64
	textSize                    uint64 // rounded to huge pages when the text is on them
	end                         uint64
	hugeR                       bool // the read-only segment is on huge pages
	hugeText                    bool
}

func (b *newBlock) huge() bool { return b.hugeR || b.hugeText }

// blockOffsets lays the new areas out from the start of the new block: program
// headers, rodata, .eh_frame_hdr, then text and data each on a page of its own (so
// each maps with its own protection), on 2 MiB pages when large.
func blockOffsets(l *Layout, textSize, rodataSize, dataSize, bssSize, ehHdrSize uint64) newBlock {
	var b newBlock
	phdrSize := uint64(l.PhdrNum) * 56
	b.rodata = align.Up(phdrSize, 64)
	b.end = phdrSize
	if rodataSize > 0 {
		b.end = b.rodata + rodataSize
	}
	b.eh = align.Up(b.end, 8)
	if ehHdrSize > 0 {
		b.end = b.eh + ehHdrSize
	}
	b.hugeR = b.end >= hugeMin
	b.hugeText = textSize >= hugeMin
	l.hugeText = b.hugeText
	if b.hugeR {
		l.rEnd = align.Up(b.end, hugePage)
		b.end = l.rEnd
	}
	b.text, b.textSize = align.Up(b.end, pageSize), textSize
	if b.hugeText {
		b.text, b.textSize = align.Up(b.end, hugePage), align.Up(textSize, hugePage)
	}
	if b.textSize > 0 {
		b.end = b.text + b.textSize
	}
	b.data = align.Up(b.end, pageSize)
	b.bss = b.data + align.Up(dataSize, 64)
	if dataSize+bssSize > 0 {
		b.end = b.bss + bssSize
	}
	return b
}

// placeBlock chooses the new block's file offset and its delta to virtual addresses:
// at the old load bias when the gap allows (pre-5.18 kernels take the load address
// from the first PT_LOAD), else the smallest address at or past base congruent to
// the file offset modulo the segment alignment.
func placeBlock(l *Layout, first Prog, base, segAlign uint64, huge bool) (fileOff, delta uint64) {
	blockAlign, phdrPad := uint64(pageSize), uint64(maxPhdrPad)
	if huge { // the new block starts on a 2 MiB page of file and memory
		blockAlign, phdrPad = hugePage, maxPhdrPad+hugePage
		segAlign = max(segAlign, hugePage)
	}
	fileOff = align.Up(l.keep, blockAlign)
	if bias := first.Vaddr - first.Off; first.Vaddr >= first.Off && bias%segAlign == 0 && bias < base {
		off := max(fileOff, align.Up(base-bias, blockAlign))
		if off-fileOff <= phdrPad {
			l.PhdrAtOldBias = true
			return off, bias
		}
	}
	v := base&^(segAlign-1) + fileOff&(segAlign-1)
	if v < base {
		v += segAlign
	}
	return fileOff, v - fileOff
}

// assign gives the layout the areas' addresses, the block being at vbase.
func (b *newBlock) assign(l *Layout, vbase, rodataSize, dataSize, bssSize, ehHdrSize uint64) {
	if rodataSize > 0 {
		l.RodataAddr, l.RodataSize = vbase+b.rodata, rodataSize
	}
	if ehHdrSize > 0 {
		l.EHHdrAddr, l.EHHdrSize = vbase+b.eh, ehHdrSize
	}
	if b.textSize > 0 {
		l.TextAddr, l.TextSize = vbase+b.text, b.textSize
	}
	if dataSize > 0 {
		l.DataAddr, l.DataSize = vbase+b.data, dataSize
	}
	if bssSize > 0 {
		l.BSSAddr, l.BSSSize = vbase+b.bss, bssSize
		if dataSize == 0 {
			l.DataAddr = vbase + b.data // the RW segment starts here even without data
		}
	}
}

// tables names the sections Rewrite moves to the end of the file.
type tables struct {
	symtab   int   // SHT_SYMTAB, -1 when absent
	strtab   int   // its string table, -1 when there is no symtab
	shstrtab int   // section name table, -1 when absent
	rels     []int // non-loaded SHT_REL/SHT_RELA sections whose symbols are in symtab (--emit-relocs)
	inPlace  []int // loaded ones (static glibc's .rela.plt of IRELATIVE relocs), renumbered where they are
	groups   []int // SHT_GROUP sections whose signature symbol is in symtab
}

// planTables finds the symbol, string and relocation tables Rewrite rewrites, and
// refuses layouts it cannot rewrite safely.
func (f *File) planTables() (tables, error) {
	t := tables{symtab: -1, strtab: -1, shstrtab: -1}
	for i, s := range f.Sections {
		if s.Type != elf.SHT_SYMTAB {
			continue
		}
		if t.symtab >= 0 {
			return t, fmt.Errorf("more than one SHT_SYMTAB section (%d and %d)", t.symtab, i)
		}
		t.symtab = i
	}
	if f.Shstrndx > 0 && f.Shstrndx < len(f.Sections) {
		t.shstrtab = f.Shstrndx
	}
	if t.symtab >= 0 {
		st := f.Sections[t.symtab]
		if st.Link == 0 || int(st.Link) >= len(f.Sections) || int(st.Link) == t.symtab {
			return t, formatErr("symbol table %s: string table index %d out of range", st.Name, st.Link)
		}
		t.strtab = int(st.Link)
		if n := st.Size / 24; uint64(st.Info) > n {
			return t, formatErr("symbol table %s: sh_info %d is past its %d symbols", st.Name, st.Info, n)
		}
		for i, s := range f.Sections {
			if int(s.Link) != t.symtab || i == t.symtab {
				continue
			}
			switch s.Type {
			case elf.SHT_REL, elf.SHT_RELA:
				if s.Flags&elf.SHF_ALLOC != 0 {
					t.inPlace = append(t.inPlace, i)
				} else {
					t.rels = append(t.rels, i)
				}
			case elf.SHT_GROUP:
				t.groups = append(t.groups, i)
			case elf.SHT_SYMTAB_SHNDX:
				return t, fmt.Errorf("section %d (%s): SHT_SYMTAB_SHNDX is not supported", i, s.Name)
			}
		}
	}
	moved := append([]int{t.symtab, t.strtab, t.shstrtab}, t.rels...)
	for _, i := range append(moved, t.inPlace...) {
		if i < 0 {
			continue
		}
		s := f.Sections[i]
		if s.Flags&elf.SHF_ALLOC != 0 && s.Type != elf.SHT_REL && s.Type != elf.SHT_RELA {
			return t, fmt.Errorf("section %d (%s) is loaded (SHF_ALLOC) but must be rewritten", i, s.Name)
		}
		if s.Type == elf.SHT_NOBITS || !f.inFile(s.Off, s.Size) {
			return t, formatErr("section %d (%s) has no file contents", i, s.Name)
		}
		if s.Type == elf.SHT_REL && s.Size%16 != 0 || s.Type == elf.SHT_RELA && s.Size%24 != 0 {
			return t, formatErr("section %d (%s): size %#x is not a whole number of entries", i, s.Name, s.Size)
		}
	}
	return t, nil
}

// keepEnd returns how many input bytes the output keeps in place: everything, except
// that the tables Rewrite moves (old section headers, symbol, string and relocation
// tables) are dropped when they sit at the very end of the file with nothing else after
// them (the usual layout), so the output does not carry two copies of them.
func (f *File) keepEnd(t tables) uint64 {
	n := uint64(len(f.Data))
	type span struct{ start, end uint64 }
	clamp := func(off, size uint64) span {
		off = min(off, n)
		return span{off, off + min(size, n-off)}
	}
	var moved []span
	if len(f.Sections) > 0 {
		moved = append(moved, clamp(f.Shoff, uint64(len(f.Sections))*64))
	}
	isMoved := map[int]bool{}
	for _, i := range append([]int{t.symtab, t.strtab, t.shstrtab}, t.rels...) {
		if i >= 0 {
			isMoved[i] = true
			s := f.Sections[i]
			moved = append(moved, clamp(s.Off, s.Size))
		}
	}
	kept := clamp(0, 64).end
	kept = max(kept, clamp(f.Phoff, uint64(len(f.Progs))*56).end)
	for _, p := range f.Progs {
		if p.Filesz > 0 {
			kept = max(kept, clamp(p.Off, p.Filesz).end)
		}
	}
	for i, s := range f.Sections {
		if isMoved[i] || s.Type == elf.SHT_NOBITS || s.Type == elf.SHT_NULL {
			continue
		}
		kept = max(kept, clamp(s.Off, s.Size).end)
	}
	cut := n
	for {
		// Peel the moved table that ends at cut, allowing a little zero alignment padding.
		best := -1
		for j, m := range moved {
			if m.start >= cut || m.end > cut || cut-m.end > 64 || !allZero(f.Data[m.end:cut]) {
				continue
			}
			if best < 0 || m.start < moved[best].start {
				best = j
			}
		}
		if best < 0 {
			break
		}
		cut = moved[best].start
	}
	return max(cut, kept)
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
