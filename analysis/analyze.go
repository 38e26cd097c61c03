package analysis

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/internal/x86dec"
)

// Options tunes Analyze.
type Options struct {
	Workers int // goroutines used by Analyze and EntrySites; 0 = GOMAXPROCS
	// StrictCalls applies the kernel's rule "no call in the DCR" as is. By
	// default a call that ends the DCR is allowed, because kprewrite's
	// detours relocate it as push $orig_ret; jmp target (see callRelocatable).
	StrictCalls bool
}

// Stats describes what Analyze indexed and how long each phase took.
type Stats struct {
	Functions         int `json:"functions"`
	CleanFunctions    int `json:"clean_functions"`
	Instructions      int `json:"instructions"`
	Edges             int `json:"edges"`
	IndirectJumps     int `json:"indirect_jumps"`
	JumpTables        int `json:"jump_tables"`
	PointerJumps      int `json:"pointer_jumps"`
	UnresolvedJumps   int `json:"unresolved_jumps"`
	PoisonedFuncs     int `json:"poisoned_functions"`
	LandingPads       int `json:"landing_pads"`
	LSDAErrors        int `json:"lsda_errors"`
	GapBytes          int `json:"gap_bytes"` // executable bytes outside every function, swept linearly
	DecodeTime        time.Duration
	IndirectTime      time.Duration
	TotalTime         time.Duration
	EHFrameIncomplete bool `json:"eh_frame_incomplete"`
}

// Binary is the immutable result of analysing one executable. All methods are
// safe for concurrent use.
type Binary struct {
	File  *elfio.File
	Funcs *elfio.Functions
	Stats Stats

	workers     int
	strictCalls bool
	secs        []codeSec
	starts      []uint64 // function starts, sorted (Funcs.List order)
	info        []funcInfo
	edges       edgeIndex
	pads        []landingPad
	lsdaErrs    []lsdaErr
	fdes        []fdeRange // sorted by start, for "is this site covered by a parsed FDE"
	ehBroken    error      // .eh_frame had entries we could not parse and the binary has LSDAs
	detourLo    uint64
	// copiedLo, copiedHi: code the program copies and runs elsewhere (copiedCode), which
	// no probe may be put in; copiedWhat says what it is
	copiedLo, copiedHi uint64
	copiedWhat         string
	detourHi           uint64
	// referenced[i]: function i's start is called, or its address taken, or exported
	// somewhere (what addTarget leaves out of the edges); a start that is only jumped to
	// may be a fragment of the function that jumps to it (Exits)
	referenced []atomic.Bool
	names      *funcNames    // retaddr.go
	blocked    *blockedFuncs // blocked.go
}

type codeSec struct {
	name     string
	addr     uint64
	end      uint64
	data     []byte
	writable bool
}

// funcInfo is what Analyze learned about one function.
type funcInfo struct {
	badAddr   uint64 // first instruction that failed rule 1 (valid when badRule != "")
	badRule   string
	badDetail string
	insts     int
	indirect  int // indirect jmps
	jumps     []indirectJump
	poison    *poisonSrc // set when an unresolved indirect jmp may land anywhere in this function
}

type poisonSrc struct {
	fn   int // function holding the unresolved jmp
	addr uint64
	why  string
}

func (fi *funcInfo) clean() bool { return fi.badRule == "" }

func (fi *funcInfo) fail(addr uint64, rule, detail string) {
	if fi.badRule == "" || addr < fi.badAddr {
		fi.badAddr, fi.badRule, fi.badDetail = addr, rule, detail
	}
}

// Analyze decodes every function of f, builds the branch-target index over all
// executable code, classifies every indirect jump and reads the exception
// tables. It fails only when f has no executable code at all, or is a Go program
// without a symbol table whose .gopclntab is unreadable.
func Analyze(f *elfio.File, opt Options) (*Binary, error) {
	t0 := time.Now()
	w := opt.Workers
	if w <= 0 {
		w = runtime.GOMAXPROCS(0)
	}
	b := &Binary{File: f, workers: w, strictCalls: opt.StrictCalls, names: &funcNames{}, blocked: &blockedFuncs{}}
	b.detourLo, b.detourHi = DetourWindow(f)
	b.copiedLo, b.copiedHi, b.copiedWhat = b.copiedCode()
	b.secs = codeSections(f)
	if len(b.secs) == 0 {
		return nil, fmt.Errorf("analyze %s: no executable code", f.Path)
	}
	b.Funcs = f.Functions()
	if b.Funcs.GoErr != nil {
		return nil, b.Funcs.GoErr // a stripped Go program whose functions cannot be known
	}
	b.starts = make([]uint64, len(b.Funcs.List))
	for i := range b.Funcs.List {
		b.starts[i] = b.Funcs.List[i].Addr
	}
	b.info = make([]funcInfo, len(b.Funcs.List))
	b.referenced = make([]atomic.Bool, len(b.Funcs.List))
	b.Stats.Functions = len(b.Funcs.List)

	// Landing pads first: the jump-table and pointer analyses treat a pad as
	// an entry from an unknown path.
	b.readLandingPads()

	// Phase 1: decode everything, collect direct edges and address-taken code.
	tasks := b.decodeTasks()
	outs := make([]workerOut, w)
	var next atomic.Int64
	var wg sync.WaitGroup
	for k := 0; k < w; k++ {
		wg.Add(1)
		go func(out *workerOut) {
			defer wg.Done()
			out.dec = x86dec.NewDecoder()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(tasks) {
					break
				}
				b.runTask(&tasks[i], out)
			}
			sortEdges(out.edges)
		}(&outs[k])
	}
	wg.Wait()
	extra := b.symbolAndRelocEdges()
	sortEdges(extra)
	for k := range outs {
		b.edges.chunks = append(b.edges.chunks, outs[k].edges)
		outs[k].dec = nil
		b.Stats.Instructions += outs[k].insts
		b.Stats.GapBytes += outs[k].gapBytes
	}
	b.edges.chunks = append(b.edges.chunks, extra)
	b.Stats.DecodeTime = time.Since(t0)

	// Phase 2: jump tables, then pointer classification, then poisoning.
	t1 := time.Now()
	var links []link
	for k := range outs {
		links = append(links, outs[k].links...)
	}
	b.classifyIndirect(links)
	b.Stats.IndirectTime = time.Since(t1)

	for i := range b.info {
		if b.info[i].clean() {
			b.Stats.CleanFunctions++
		}
		if b.info[i].poison != nil {
			b.Stats.PoisonedFuncs++
		}
	}
	b.Stats.Edges = b.edges.count()
	b.Stats.TotalTime = time.Since(t0)
	return b, nil
}

// codeSections returns the executable sections, or the executable PT_LOAD
// file images when the section headers are missing.
func codeSections(f *elfio.File) []codeSec {
	var out []codeSec
	for _, s := range f.ExecSections() {
		out = append(out, codeSec{name: s.Name, addr: s.Addr, end: s.Addr + s.Size, data: f.SectionData(s),
			writable: s.Flags&elf.SHF_WRITE != 0})
	}
	if len(out) > 0 {
		return out
	}
	for _, p := range f.Loads() {
		if p.Flags&elf.PF_X == 0 || p.Filesz == 0 {
			continue
		}
		out = append(out, codeSec{name: fmt.Sprintf("PT_LOAD[%d]", p.Index), addr: p.Vaddr, end: p.Vaddr + p.Filesz,
			data: f.Data[p.Off : p.Off+p.Filesz], writable: p.Flags&elf.PF_W != 0})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].addr < out[j].addr })
	return out
}

// sec returns the code section holding addr.
func (b *Binary) sec(addr uint64) *codeSec {
	i := sort.Search(len(b.secs), func(i int) bool { return b.secs[i].end > addr })
	if i < len(b.secs) && addr >= b.secs[i].addr {
		return &b.secs[i]
	}
	return nil
}

// isCode reports whether addr is inside an executable section.
func (b *Binary) isCode(addr uint64) bool { return b.sec(addr) != nil }

// code returns the bytes [addr, addr+n) if they lie inside one code section.
func (b *Binary) code(addr, n uint64) []byte {
	s := b.sec(addr)
	if s == nil || n > s.end-addr {
		return nil
	}
	off := addr - s.addr
	return s.data[off : off+n : off+n]
}

// codeFrom returns the bytes from addr to the end of its code section.
func (b *Binary) codeFrom(addr uint64) []byte {
	s := b.sec(addr)
	if s == nil {
		return nil
	}
	return s.data[addr-s.addr:]
}

// isStart reports whether addr is the start of a known function.
func (b *Binary) isStart(addr uint64) bool {
	_, ok := b.startIndex(addr)
	return ok
}

// startIndex returns the index of the function starting at addr.
func (b *Binary) startIndex(addr uint64) (int, bool) {
	i := sort.Search(len(b.starts), func(i int) bool { return b.starts[i] >= addr })
	return i, i < len(b.starts) && b.starts[i] == addr
}

// funcAt returns the index of the function containing addr (the innermost
// when ranges nest), or -1.
func (b *Binary) funcAt(addr uint64) int {
	i := sort.Search(len(b.starts), func(i int) bool { return b.starts[i] > addr }) - 1
	for k := i; k >= 0 && k > i-32; k-- {
		if addr < b.Funcs.List[k].End() {
			return k
		}
	}
	return -1
}

// startsIn returns the first function start in (lo, hi), if any.
func (b *Binary) startsIn(lo, hi uint64) (int, bool) {
	i := sort.Search(len(b.starts), func(i int) bool { return b.starts[i] > lo })
	if i < len(b.starts) && b.starts[i] < hi {
		return i, true
	}
	return 0, false
}

type taskKind uint8

const (
	taskFunc taskKind = iota
	taskGap
	taskData
)

type task struct {
	kind   taskKind
	fn     int
	lo, hi uint64
	data   []byte
}

type link struct {
	fn   int
	src  uint64
	dst  uint64
	kind edgeKind
	jcc  bool
}

type workerOut struct {
	dec      *x86dec.Decoder // memoises x86asm's verdicts (one per worker)
	edges    []edge
	links    []link
	insts    int
	gapBytes int
}

// decodeTasks lists the functions, the code gaps between them and the data
// sections to scan for code pointers, largest work first within each kind.
func (b *Binary) decodeTasks() []task {
	var ts []task
	for i := range b.Funcs.List {
		ts = append(ts, task{kind: taskFunc, fn: i})
	}
	// Gaps: executable bytes covered by no function.
	for si := range b.secs {
		s := &b.secs[si]
		pos := s.addr
		i := sort.Search(len(b.starts), func(i int) bool { return b.Funcs.List[i].End() > s.addr })
		for ; i < len(b.starts) && b.starts[i] < s.end; i++ {
			fn := &b.Funcs.List[i]
			if fn.Addr > pos {
				ts = append(ts, task{kind: taskGap, lo: pos, hi: fn.Addr})
			}
			if e := fn.End(); e > pos {
				pos = e
			}
		}
		if pos < s.end {
			ts = append(ts, task{kind: taskGap, lo: pos, hi: s.end})
		}
	}
	// Data sections, in 1 MiB slices. In a position-independent file every
	// absolute code pointer has a dynamic relocation (symbolAndRelocEdges),
	// and raw words are link-time values that may alias small integers.
	for _, s := range b.File.Sections {
		if b.File.IsPIE() {
			break
		}
		if !dataToScan(&s) {
			continue
		}
		d := b.File.SectionData(&s)
		const chunk = 1 << 20
		for off := 0; off < len(d); off += chunk {
			end := min(off+chunk, len(d))
			ts = append(ts, task{kind: taskData, lo: s.Addr + uint64(off), hi: s.Addr + uint64(end), data: d[off:end]})
		}
	}
	return ts
}

// dataToScan selects the allocated, non-executable sections whose 8-byte words
// may hold code pointers (function-pointer tables, vtables, computed-goto
// tables, absolute jump tables).
func dataToScan(s *elfio.Section) bool {
	if s.Flags&elf.SHF_ALLOC == 0 || s.Flags&elf.SHF_EXECINSTR != 0 || s.Size < 8 {
		return false
	}
	switch s.Type {
	case elf.SHT_PROGBITS, elf.SHT_INIT_ARRAY, elf.SHT_FINI_ARRAY, elf.SHT_PREINIT_ARRAY:
	default:
		return false
	}
	switch {
	case strings.HasPrefix(s.Name, ".eh_frame"), s.Name == ".gcc_except_table", strings.HasPrefix(s.Name, ".note"),
		s.Name == ".interp", strings.HasPrefix(s.Name, ".gnu.version"), s.Name == ".gnu.hash":
		return false
	}
	return true
}

func (b *Binary) runTask(t *task, out *workerOut) {
	switch t.kind {
	case taskFunc:
		b.decodeFunc(t.fn, out)
	case taskGap:
		b.decodeGap(t.lo, t.hi, out)
	case taskData:
		b.scanData(t.lo, t.data, out)
	}
}

// addTarget records an edge into code. Calls and taken addresses of function
// starts are left out (they are most edges, and a start is never inside a
// DCR: rule 2 checks starts itself); jumps to starts are kept for the
// backward walks of the indirect-jump analysis.
func (b *Binary) addTarget(out *workerOut, dst, src uint64, k edgeKind) {
	if !b.isCode(dst) {
		return
	}
	if k != ekBranch && k != ekTable {
		if i, ok := b.startIndex(dst); ok {
			b.referenced[i].Store(true)
			return
		}
	}
	out.edges = append(out.edges, edge{dst: dst, src: src, kind: k})
}

// decodeFunc decodes one function in full (rule 1) and records its edges.
func (b *Binary) decodeFunc(i int, out *workerOut) {
	fn := &b.Funcs.List[i]
	fi := &b.info[i]
	code := b.code(fn.Addr, fn.Size)
	if code == nil || fn.Size == 0 {
		fi.fail(fn.Addr, RuleDecodeError, fmt.Sprintf("function bytes %#x+%#x are not inside one executable section", fn.Addr, fn.Size))
		return
	}
	end := fn.End()
	for off := 0; off < len(code); {
		pc := fn.Addr + uint64(off)
		in, err := out.dec.Decode(code[off:], pc)
		n := in.Len
		if err != nil {
			fi.fail(pc, RuleDecodeError, err.Error())
			if n <= 0 || off+n > len(code) {
				n = 1
			}
			off += n
			continue
		}
		fi.insts++
		if !in.Trusted {
			fi.fail(pc, RuleDecodeDisagree, disagreeDetail(code[off:off+n], in))
		}
		b.instEdges(code[off:off+n], pc, &in, out)
		if in.Kind.IsDirectBranch() && in.Kind != x86dec.KindCall && (in.Target < fn.Addr || in.Target >= end) {
			out.links = append(out.links, link{fn: i, src: pc, dst: in.Target, kind: ekBranch, jcc: in.Kind == x86dec.KindJcc})
		}
		if in.Kind == x86dec.KindJmpIndirect {
			fi.indirect++
		}
		off += n
	}
	out.insts += fi.insts
}

func disagreeDetail(raw []byte, in x86dec.Inst) string {
	if in.Op == 0 {
		return fmt.Sprintf("x86asm cannot name the %d-byte instruction % x", len(raw), raw)
	}
	return fmt.Sprintf("x86asm reads % x differently (length or control-flow class) from our length decoder (%d bytes)", raw, len(raw))
}

// decodeGap sweeps code that belongs to no function, for its edges only.
func (b *Binary) decodeGap(lo, hi uint64, out *workerOut) {
	code := b.code(lo, hi-lo)
	out.gapBytes += len(code)
	for off := 0; off < len(code); {
		pc := lo + uint64(off)
		in, err := x86dec.DecodeFast(code[off:], pc)
		n := in.Len
		if err != nil || n <= 0 {
			off++
			continue
		}
		b.instEdges(code[off:off+n], pc, &in, out)
		off += n
	}
}

// instEdges records the direct branch target and any code address the
// instruction takes (lea X(%rip), mov/push of an immediate code address).
func (b *Binary) instEdges(raw []byte, pc uint64, in *x86dec.Inst, out *workerOut) {
	if in.Kind.IsDirectBranch() {
		k := ekBranch
		if in.Kind == x86dec.KindCall {
			k = ekCall
		}
		b.addTarget(out, in.Target, pc, k)
		return
	}
	if in.Enc != x86dec.EncLegacy {
		return
	}
	m, op := opcodeOf(raw, in)
	if in.RIPRel {
		if m == 0 && op == 0x8d { // lea
			b.addTarget(out, in.RIPTarget, pc, ekLea)
		}
		return
	}
	if m != 0 || in.ImmSize < 4 || in.ImmOff < 0 || in.ImmOff+in.ImmSize > len(raw) {
		return
	}
	isMov := op >= 0xb8 && op <= 0xbf || op == 0xc7 && in.ModRMOff >= 0 && raw[in.ModRMOff]>>3&7 == 0
	if !isMov && op != 0x68 {
		return
	}
	var v uint64
	if in.ImmSize == 8 {
		v = binary.LittleEndian.Uint64(raw[in.ImmOff:])
	} else {
		v = uint64(binary.LittleEndian.Uint32(raw[in.ImmOff:]))
	}
	if b.File.IsPIE() {
		return // an absolute immediate cannot be a code address of a PIE
	}
	b.addTarget(out, v, pc, ekImm)
}

// opcodeOf returns the legacy opcode map (0 one-byte, 1 0f, 2 0f38, 3 0f3a)
// and the opcode byte.
func opcodeOf(raw []byte, in *x86dec.Inst) (m int, op byte) {
	o := in.OpcodeOff
	if o < 0 || o >= len(raw) {
		return -1, 0
	}
	op = raw[o]
	if in.Enc != x86dec.EncLegacy {
		return 4, op
	}
	switch {
	case o >= 2 && raw[o-2] == 0x0f && raw[o-1] == 0x38:
		return 2, op
	case o >= 2 && raw[o-2] == 0x0f && raw[o-1] == 0x3a:
		return 3, op
	case o >= 1 && raw[o-1] == 0x0f:
		return 1, op
	}
	return 0, op
}

// scanData records every 8-byte-aligned word of a data section that holds a
// code address. In a non-PIE binary absolute pointers are stored as is; in a
// PIE they also carry a relocation (symbolAndRelocEdges).
func (b *Binary) scanData(addr uint64, d []byte, out *workerOut) {
	lo, hi := b.secs[0].addr, b.secs[len(b.secs)-1].end
	first := int((8 - addr%8) % 8)
	for off := first; off+8 <= len(d); off += 8 {
		v := binary.LittleEndian.Uint64(d[off:])
		if v < lo || v >= hi {
			continue
		}
		b.addTarget(out, v, addr+uint64(off), ekData)
	}
}

// symbolAndRelocEdges indexes global and dynamic symbols that sit inside code
// without being a function start, and dynamic relocations that resolve to
// code addresses.
func (b *Binary) symbolAndRelocEdges() []edge {
	var out workerOut
	f := b.File
	var dyn []int
	for i, s := range f.Symbols {
		if s.Dynamic {
			dyn = append(dyn, i)
		}
		if s.Type == elf.STT_SECTION || s.Type == elf.STT_FILE || s.Shndx == uint16(elf.SHN_UNDEF) || s.Shndx == uint16(elf.SHN_ABS) {
			continue
		}
		// Go's scheduler gives every goroutine the fake return address
		// goexit+PCQuantum, computed from the function's address, so the byte
		// after goexit's first instruction is entered by a return.
		if s.Name == "runtime.goexit" || s.Name == "runtime.goexit.abi0" {
			b.addTarget(&out, s.Value+1, uint64(i), ekSymbol)
		}
		// A local label only names an address; code that uses it shows up as a
		// branch, lea or data edge. An exported symbol may be entered from
		// another module.
		if !s.Dynamic && s.Bind == elf.STB_LOCAL {
			continue
		}
		b.addTarget(&out, s.Value, uint64(i), ekSymbol)
	}
	for _, s := range f.Sections {
		if s.Type == shtRELR && s.Flags&elf.SHF_ALLOC != 0 {
			b.relrEdges(f.SectionData(&s), &out)
			continue
		}
		if s.Type != elf.SHT_RELA || s.Flags&elf.SHF_ALLOC == 0 {
			continue
		}
		d := f.SectionData(&s)
		for off := 0; off+24 <= len(d); off += 24 {
			slot := binary.LittleEndian.Uint64(d[off:])
			info := binary.LittleEndian.Uint64(d[off+8:])
			add := binary.LittleEndian.Uint64(d[off+16:])
			var v uint64
			switch elf.R_X86_64(info & 0xffffffff) {
			case elf.R_X86_64_RELATIVE, elf.R_X86_64_IRELATIVE:
				v = add
			case elf.R_X86_64_64:
				si := int(info >> 32)
				if si <= 0 || si > len(dyn) {
					continue
				}
				sym := f.Symbols[dyn[si-1]]
				if sym.Shndx == uint16(elf.SHN_UNDEF) {
					continue
				}
				v = sym.Value + add
			default:
				continue
			}
			b.addTarget(&out, v, slot, ekReloc)
		}
	}
	return out.edges
}

// sectionAt returns the allocated, file-backed section holding addr.
func sectionAt(f *elfio.File, addr uint64) *elfio.Section {
	for i := range f.Sections {
		s := &f.Sections[i]
		if s.Flags&elf.SHF_ALLOC != 0 && s.Type != elf.SHT_NOBITS && s.Type != elf.SHT_NULL && addr >= s.Addr && addr-s.Addr < s.Size {
			return s
		}
	}
	return nil
}

// shtRELR is SHT_RELR (compact relative relocations, -z pack-relative-relocs).
const shtRELR = elf.SectionType(19)

// relrEdges decodes a .relr.dyn table: an even word is the address of a slot
// to relocate, an odd word a bitmap of the 63 slots after the last address.
// RELR slots hold their addend, the link-time pointer value.
func (b *Binary) relrEdges(d []byte, out *workerOut) {
	var where uint64
	slot := func(a uint64) {
		if p, err := b.File.Bytes(a, 8); err == nil {
			b.addTarget(out, binary.LittleEndian.Uint64(p), a, ekReloc)
		}
	}
	for off := 0; off+8 <= len(d); off += 8 {
		w := binary.LittleEndian.Uint64(d[off:])
		if w&1 == 0 {
			slot(w)
			where = w + 8
			continue
		}
		for i := uint64(0); i < 63; i++ {
			if w>>(i+1)&1 != 0 {
				slot(where + 8*i)
			}
		}
		where += 63 * 8
	}
}
