package analysis

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/arch/x86/x86asm"

	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/internal/x86dec"
)

// ijClass is what the analysis knows about an indirect jmp's targets.
type ijClass uint8

const (
	// ijUnresolved: the target is computed in a way we cannot bound; it may be
	// any address of the function or of its split fragments (rule 4).
	ijUnresolved ijClass = iota
	// ijTable: a jump table whose bound and entries were read; every entry is
	// an edge of the branch-target index.
	ijTable
	// ijPointer: the target is a whole 64-bit code pointer: loaded from memory,
	// returned by a call, passed in by the caller, or a constant. Code pointers
	// can only come from places the address-taken index covers (lea/mov/push
	// of code addresses, 8-byte data words, relocations, symbols, return
	// addresses, which follow a call and so never lie inside a DCR), so such a
	// jump cannot land in a DCR interior the index does not already forbid.
	// This is how tail calls through the GOT, vtables, function pointers and
	// computed-goto tables are accepted.
	ijPointer
)

func (c ijClass) String() string {
	switch c {
	case ijTable:
		return "jump table"
	case ijPointer:
		return "pointer jump"
	}
	return "unresolved"
}

type indirectJump struct {
	addr   uint64
	class  ijClass
	detail string
}

// finst is one instruction of a function being re-read for its indirect jumps.
type finst struct {
	addr uint64
	off  int
	in   cinst
	xi   *x86asm.Inst // operands, decoded on demand
	xerr bool
}

// cinst is the part of x86dec.Inst the backward analyses need (x86dec.Inst
// is large and huge functions have hundreds of thousands of instructions).
type cinst struct {
	Len       int
	Target    uint64
	RIPTarget uint64
	Kind      x86dec.Kind
	RIPRel    bool
	Endbr     bool
	fall      bool
	pad       bool // nop or int3: alignment padding when nothing reaches it
}

func (c *cinst) FallsThrough() bool { return c.fall }

// fcode is a decoded function.
type fcode struct {
	idx    int
	fn     *elfio.Func
	code   []byte
	insts  []finst
	ijs    []int             // indices of the indirect jmps
	others map[int]*fcode    // other functions the backward walks entered
	good   map[walkItem]bool // (instruction, register) pairs already shown to hold only code pointers
}

func (b *Binary) loadFunc(i int) *fcode {
	fn := &b.Funcs.List[i]
	fc := &fcode{idx: i, fn: fn, code: b.code(fn.Addr, fn.Size)}
	fc.insts = make([]finst, 0, len(fc.code)/4+1)
	for off := 0; off < len(fc.code); {
		pc := fn.Addr + uint64(off)
		in, err := x86dec.DecodeFast(fc.code[off:], pc)
		if err != nil || in.Len <= 0 || off+in.Len > len(fc.code) {
			off++
			continue
		}
		if in.Kind == x86dec.KindJmpIndirect {
			fc.ijs = append(fc.ijs, len(fc.insts))
		}
		fc.insts = append(fc.insts, finst{addr: pc, off: off, in: cinst{
			Len: in.Len, Target: in.Target, RIPTarget: in.RIPTarget, Kind: in.Kind, RIPRel: in.RIPRel, Endbr: in.Endbr,
			fall: in.FallsThrough(), pad: in.Kind == x86dec.KindInt3 || isNop(fc.code[off:off+in.Len], &in),
		}})
		off += in.Len
	}
	return fc
}

// find returns the index of the instruction starting at addr, or -1.
func (fc *fcode) find(addr uint64) int {
	i := sort.Search(len(fc.insts), func(i int) bool { return fc.insts[i].addr >= addr })
	if i < len(fc.insts) && fc.insts[i].addr == addr {
		return i
	}
	return -1
}

// x returns x86asm's reading of instruction k (nil if it has none with our
// length): the operand view the jump-table and pointer analyses need.
func (fc *fcode) x(k int) *x86asm.Inst {
	fi := &fc.insts[k]
	if fi.xi == nil && !fi.xerr {
		xi, err := x86dec.Operands(fc.code[fi.off : fi.off+fi.in.Len])
		if err != nil {
			fi.xerr = true
			return nil
		}
		fi.xi = &xi
	}
	return fi.xi
}

// classifyIndirect resolves jump tables, classifies the remaining indirect
// jmps, and marks functions an unresolved jmp may land in.
func (b *Binary) classifyIndirect(links []link) {
	var todo []int
	for i := range b.info {
		if b.info[i].indirect > 0 {
			todo = append(todo, i)
		}
	}
	fcs := make([]*fcode, len(todo))
	type out struct {
		edges []edge
		links []link
	}
	outs := make([]out, b.workers)
	parallel := func(work func(k int, o *out)) {
		var next atomic.Int64
		var wg sync.WaitGroup
		for w := 0; w < b.workers; w++ {
			wg.Add(1)
			go func(o *out) {
				defer wg.Done()
				for {
					k := int(next.Add(1) - 1)
					if k >= len(todo) {
						return
					}
					work(k, o)
				}
			}(&outs[w])
		}
		wg.Wait()
	}

	// Jump tables first: their entries are edges the pointer analysis needs.
	parallel(func(k int, o *out) {
		fc := b.loadFunc(todo[k])
		fcs[k] = fc
		fi := &b.info[fc.idx]
		for j := range fc.insts {
			if fc.insts[j].in.Kind != x86dec.KindJmpIndirect {
				continue
			}
			ij := indirectJump{addr: fc.insts[j].addr}
			if t, ok := b.matchTable(fc, j); ok {
				ij.class, ij.detail = ijTable, t.String()
				for _, dst := range t.targets {
					o.edges = append(o.edges, edge{dst: dst, src: ij.addr, kind: ekTable})
					if dst < fc.fn.Addr || dst >= fc.fn.End() {
						o.links = append(o.links, link{fn: fc.idx, src: ij.addr, dst: dst, kind: ekTable})
					}
				}
			}
			fi.jumps = append(fi.jumps, ij)
		}
	})
	var tableEdges []edge
	for w := range outs {
		tableEdges = append(tableEdges, outs[w].edges...)
		links = append(links, outs[w].links...)
	}
	sortEdges(tableEdges)
	b.edges.chunks = append(b.edges.chunks, tableEdges)

	parallel(func(k int, o *out) {
		fc := fcs[k]
		fi := &b.info[fc.idx]
		for n := range fi.jumps {
			ij := &fi.jumps[n]
			if ij.class == ijTable {
				continue
			}
			j := fc.find(ij.addr)
			if ok, detail := b.pointerJump(fc, j); ok {
				ij.class, ij.detail = ijPointer, detail
			} else {
				ij.detail = detail
			}
		}
		fcs[k] = nil
	})

	unres := map[int]*poisonSrc{}
	for _, i := range todo {
		for _, ij := range b.info[i].jumps {
			b.Stats.IndirectJumps++
			switch ij.class {
			case ijTable:
				b.Stats.JumpTables++
			case ijPointer:
				b.Stats.PointerJumps++
			default:
				b.Stats.UnresolvedJumps++
				if unres[i] == nil {
					unres[i] = &poisonSrc{fn: i, addr: ij.addr, why: ij.detail}
				}
			}
		}
	}
	for i, p := range unres {
		b.info[i].poison = p
	}
	// An unresolved jmp may land anywhere in its source function, and that
	// includes the function's split fragments (foo.cold, or code the hot part
	// shares with them): poison every function linked to it by a direct
	// jmp/jcc or a table entry into its interior, by a jcc to its entry, or by
	// a jmp to a .cold fragment.
	for _, l := range links {
		a := l.fn
		bi := b.funcAt(l.dst)
		if bi < 0 || bi == a {
			continue
		}
		if l.dst == b.Funcs.List[bi].Addr && !l.jcc && !strings.Contains(b.Funcs.List[bi].Name, ".cold") {
			continue // a tail call
		}
		if p := unres[a]; p != nil && b.info[bi].poison == nil {
			b.info[bi].poison = p
		}
		if p := unres[bi]; p != nil && b.info[a].poison == nil {
			b.info[a].poison = p
		}
	}
}

// ---- jump tables ----

// tableMatch is a resolved jump table.
type tableMatch struct {
	rel      bool // int32 entries added to base (else absolute 8-byte entries)
	table    uint64
	base     uint64
	count    int
	cmpAddr  uint64
	jccAddr  uint64
	jccName  string
	bound    uint64
	loadAddr uint64
	targets  []uint64
	sec      string
	joins    int // bounded paths that join the dispatch sequence
}

func (t *tableMatch) String() string {
	kind := "absolute 8-byte entries"
	if t.rel {
		kind = fmt.Sprintf("int32 entries relative to %#x", t.base)
	}
	j := ""
	if t.joins > 0 {
		j = fmt.Sprintf(" (and %d joining paths, each bounded)", t.joins)
	}
	return fmt.Sprintf("jump table at %#x (%s) with %d %s; bound from cmp $%#x at %#x + %s at %#x%s",
		t.table, t.sec, t.count, kind, t.bound, t.cmpAddr, t.jccName, t.jccAddr, j)
}

// symKind is the shape of a symbolic register value in the dispatch sequence.
type symKind uint8

const (
	svUnknown symKind = iota
	svZext            // unknown value known to fit in 32 bits (a 32-bit write zero-extends)
	svLin             // c + s*i, where i is the switch index (s == 0: a constant)
	svLow             // the low `size` bytes hold i, the upper bytes are unknown
	svLoad            // ext(mem[c + s*i]) of `size` bytes, sign-extended if signed
	svSum             // svLoad + add
)

type sym struct {
	k      symKind
	c, s   int64
	size   int
	signed bool
	add    int64
	id     int // identity of an unknown value, so copies made before the bound check are bounded too
}

// dispatch holds the symbolic state of a straight-line dispatch sequence.
type dispatch struct {
	reg     [nGPR]sym
	ids     int
	count   int64 // the index is in [0, count)
	slot    *x86asm.Mem
	slotW   int
	bounded bool
	// resolve finds a register's constant value on entry to the path (all
	// reaching definitions load the same address), or fails.
	resolve func(fam int) (int64, bool)
	// zext reports that a register's upper half is zero on entry to the path.
	zext func(fam int) bool
}

// zextID marks the identity of "the zero-extended low 32 bits of value id".
const zextID = 1 << 30

func (d *dispatch) fresh() sym { d.ids++; return sym{k: svUnknown, id: d.ids} }

// fits32 reports whether a lin value stays in [0, 2^32) over the whole index range.
func (d *dispatch) fits(v sym, bits uint) bool {
	if v.k != svLin {
		return false
	}
	lim := int64(1) << bits
	hi := v.c + v.s*(d.count-1)
	return v.c >= 0 && v.c < lim && hi >= 0 && hi < lim
}

// read returns the value of register r as read at its width.
func (d *dispatch) read(r x86asm.Reg) sym {
	f, w, ok := gpr(r)
	if !ok {
		return sym{}
	}
	v := d.reg[f]
	switch w {
	case 8:
		if v.k == svLow {
			return sym{}
		}
		return v
	case 4:
		switch v.k {
		case svLin:
			if d.fits(v, 32) {
				return v
			}
		case svLow:
			if v.size >= 4 {
				return sym{k: svLin, s: 1}
			}
		case svZext:
			return v
		case svUnknown:
			if v.id > 0 {
				// The zero-extended low half of a known unknown value.
				return sym{k: svZext, id: v.id | zextID}
			}
		case svLoad:
			if v.size <= 4 && !v.signed {
				return v
			}
		}
		return sym{k: svUnknown}
	}
	return sym{}
}

// write stores v into register r with x86-64 semantics (32-bit writes
// zero-extend, 8/16-bit writes merge).
func (d *dispatch) write(r x86asm.Reg, v sym) {
	f, w, ok := gpr(r)
	if !ok {
		return
	}
	switch w {
	case 8:
		d.reg[f] = v
	case 4:
		switch {
		case v.k == svLin && d.fits(v, 32), v.k == svLoad && v.size <= 4 && !v.signed, v.k == svZext:
			d.reg[f] = v
		case v.k == svLoad && v.size == 4:
			v.signed = false
			d.reg[f] = v
		default:
			d.reg[f] = sym{k: svZext, id: d.fresh().id}
		}
	default:
		d.reg[f] = d.fresh()
	}
}

// addr evaluates a memory operand's address: a lin value, or unknown.
func (d *dispatch) addr(m x86asm.Mem, in *cinst) sym {
	if m.Segment != 0 {
		return sym{}
	}
	v := sym{k: svLin, c: m.Disp}
	switch {
	case m.Base == x86asm.RIP:
		if !in.RIPRel {
			return sym{}
		}
		v.c = int64(in.RIPTarget)
	case m.Base != 0:
		if _, w, ok := gpr(m.Base); !ok || w != 8 {
			return sym{}
		}
		bv := d.read(m.Base)
		if f := gprFam(m.Base); bv.k == svUnknown && bv.id >= 1 && bv.id <= nGPR && d.resolve != nil {
			// The path's incoming value: a table base hoisted out of a loop.
			if c, ok := d.resolve(f); ok {
				bv = sym{k: svLin, c: c}
				d.reg[f] = bv
			}
		}
		if bv.k != svLin {
			return sym{}
		}
		v.c += bv.c
		v.s += bv.s
	}
	if m.Index != 0 {
		if _, w, ok := gpr(m.Index); !ok || w != 8 {
			return sym{}
		}
		iv := d.read(m.Index)
		if iv.k != svLin {
			return sym{}
		}
		sc := int64(m.Scale)
		v.c += iv.c * sc
		v.s += iv.s * sc
	}
	return v
}

// matchTable recognises the dispatch sequences GCC and Clang emit for switch
// statements (-O0 to -O3, PIE and non-PIE, with or without notrack):
//
//	cmp $N, idx ; ja default          (or jae with N entries)
//	[mov %e,%e | movslq | cltq | lea T(%rip),%rb | mov (..),%e | lea 0(,%ri,4) ...]
//	movslq (%rb,%ri,4),%rx ; add %rb,%rx ; jmp *%rx      rel32 table (PIE)
//	jmp *T(,%ri,8)  |  mov T(,%ri,8),%rx ; jmp *%rx     absolute table (non-PIE)
//
// by executing the straight-line code before the jmp symbolically. The bound
// must come from an unsigned compare immediately followed by ja/jae whose
// fall-through reaches the jmp. Where other branches join the sequence (GCC
// shares one dispatch block between several range checks), every joining
// branch must itself be a bounded path: a jbe/jb right after its own compare,
// or a jmp ending a block that starts with cmp + ja/jae; each path is
// executed on its own and all must name the same table, whose size is the
// largest bound. Any other entry (a table entry, a landing pad, an address
// taken, a function start) makes the match fail.
func (b *Binary) matchTable(fc *fcode, j int) (tableMatch, bool) {
	var t tableMatch
	// Walk back to the bound check of the fall-through path, noting joins.
	type join struct {
		at  int // index of the instruction the branch enters
		src uint64
	}
	var joins []join
	k := -1
	for m := j - 1; m >= 1 && m >= j-64; m-- {
		nextAddr := fc.insts[m+1].addr
		if b.isPad(nextAddr) || (b.isStart(nextAddr) && nextAddr != fc.fn.Addr) {
			return t, false
		}
		bad := false
		b.edges.in(nextAddr, nextAddr+1, func(e *edge) bool {
			if e.kind != ekBranch || len(joins) >= 8 {
				bad = true
				return false
			}
			joins = append(joins, join{m + 1, e.src})
			return true
		})
		if bad {
			return t, false
		}
		in := &fc.insts[m].in
		if in.Kind == x86dec.KindJcc {
			k = m
			break
		}
		if !in.FallsThrough() || in.Kind != x86dec.KindOther {
			return t, false
		}
	}
	if k < 1 {
		return t, false
	}
	main, ok := b.boundedPath(fc, k, false)
	if !ok {
		return t, false
	}
	main.cont = k + 1
	paths := []tablePath{main}
	for _, jn := range joins {
		src := fc.find(jn.src)
		if src < 1 || jn.src < fc.fn.Addr || jn.src >= fc.fn.End() {
			return t, false
		}
		p, ok := b.boundedPath(fc, src, true)
		if !ok {
			return t, false
		}
		p.cont = jn.at
		paths = append(paths, p)
	}
	for n, p := range paths {
		r, ok := b.runPath(fc, j, p)
		if !ok {
			return t, false
		}
		if n == 0 {
			t = r
			continue
		}
		if r.rel != t.rel || r.table != t.table || r.base != t.base {
			return t, false
		}
		if r.count > t.count {
			t.count, t.bound, t.cmpAddr, t.jccAddr, t.jccName = r.count, r.bound, r.cmpAddr, r.jccAddr, r.jccName
		}
	}
	t.joins = len(paths) - 1
	return t, b.readTable(&t)
}

// tablePath is one way into a dispatch sequence: execute pre (which holds the
// bound check at cmp/jcc), then the sequence from cont to the jmp.
type tablePath struct {
	pre      []int
	cmp, jcc int
	count    int64
	jccName  string
	cont     int
}

// boundedPath finds the bound check of the path that ends at instruction e:
// e itself a jbe/jb taken into the sequence (viaBranch) right after a compare,
// or a ja/jae falling through (not viaBranch), or an unconditional jmp at the
// end of a straight-line block that starts with cmp + ja/jae (viaBranch).
func (b *Binary) boundedPath(fc *fcode, e int, viaBranch bool) (tablePath, bool) {
	var p tablePath
	k := e
	xe := fc.x(e)
	if xe == nil {
		return p, false
	}
	switch {
	case !viaBranch && (xe.Op == x86asm.JA || xe.Op == x86asm.JAE):
	case viaBranch && (xe.Op == x86asm.JBE || xe.Op == x86asm.JB):
	case viaBranch && fc.insts[e].in.Kind == x86dec.KindJmp:
		// Walk back over straight-line code to a cmp + ja/jae.
		k = -1
		for m := e - 1; m >= 1 && m >= e-32; m-- {
			a := fc.insts[m+1].addr
			if b.edges.any(a, a+1) || b.isPad(a) || (b.isStart(a) && a != fc.fn.Addr) {
				return p, false
			}
			in := &fc.insts[m].in
			if in.Kind == x86dec.KindJcc {
				k = m
				break
			}
			if !in.FallsThrough() || in.Kind != x86dec.KindOther {
				return p, false
			}
		}
		if k < 1 {
			return p, false
		}
		if xk := fc.x(k); xk == nil || (xk.Op != x86asm.JA && xk.Op != x86asm.JAE) {
			return p, false
		}
	default:
		return p, false
	}
	xk, xc := fc.x(k), fc.x(k-1)
	if k < 1 || xc == nil || xc.Op != x86asm.CMP || fc.insts[k-1].addr+uint64(fc.insts[k-1].in.Len) != fc.insts[k].addr {
		return p, false
	}
	imm, ok := xc.Args[1].(x86asm.Imm)
	if !ok || imm < 0 || imm > 1<<16 {
		return p, false
	}
	p.cmp, p.jcc = k-1, k
	p.jccName = strings.ToLower(xk.Op.String())
	switch xk.Op {
	case x86asm.JA, x86asm.JBE:
		p.count = int64(imm) + 1
	default:
		p.count = int64(imm)
	}
	if p.count <= 0 {
		return p, false
	}
	// The out-of-range edge must leave: a fall-through ja/jae must not
	// target the code between it and e.
	if k != e {
		if jt := fc.insts[k].in.Target; jt > fc.insts[k].addr && jt <= fc.insts[e].addr {
			return p, false
		}
	}
	// Start a little before the compare (GCC hoists the table base above
	// it), at the latest join point.
	s := k - 1
	for s > 0 && s > k-1-12 {
		a := fc.insts[s].addr
		if b.edges.any(a, a+1) || b.isPad(a) || (b.isStart(a) && a != fc.fn.Addr) || !fc.insts[s-1].in.FallsThrough() ||
			fc.insts[s-1].in.Kind != x86dec.KindOther {
			break
		}
		s--
	}
	for m := s; m <= e; m++ {
		p.pre = append(p.pre, m)
	}
	return p, true
}

// runPath executes one path symbolically up to jmp j and reads the table
// shape the jmp uses.
func (b *Binary) runPath(fc *fcode, j int, p tablePath) (tableMatch, bool) {
	var t tableMatch
	d := &dispatch{count: p.count}
	d.resolve = func(fam int) (int64, bool) { return b.constReg(fc, p.pre[0], fam) }
	d.zext = func(fam int) bool { return b.zextReg(fc, p.pre[0], fam) }
	t.jccName = p.jccName
	t.cmpAddr, t.jccAddr = fc.insts[p.cmp].addr, fc.insts[p.jcc].addr
	for f := range d.reg {
		d.reg[f] = d.fresh()
	}
	seq := append([]int(nil), p.pre...)
	for m := p.cont; m < j; m++ {
		seq = append(seq, m)
	}
	last := p.pre[len(p.pre)-1]
	for _, m := range seq {
		if fc.insts[m].in.Endbr {
			continue // x86asm cannot name it; it changes nothing
		}
		x := fc.x(m)
		if x == nil {
			return t, false
		}
		switch {
		case m == p.cmp:
			if !d.bound(x) {
				return t, false
			}
			if imm, ok := x.Args[1].(x86asm.Imm); ok {
				t.bound = uint64(imm)
			}
			continue
		case m == p.jcc || m == last && fc.insts[m].in.Kind == x86dec.KindJmp:
			continue
		}
		if !d.step(x, &fc.insts[m], &t) {
			return t, false
		}
	}
	if !d.bounded {
		return t, false
	}
	x := fc.x(j)
	if x == nil {
		return t, false
	}
	var v sym
	switch a := x.Args[0].(type) {
	case x86asm.Reg:
		if _, w, ok := gpr(a); !ok || w != 8 {
			return t, false
		}
		v = d.read(a)
	case x86asm.Mem:
		av := d.addr(a, &fc.insts[j].in)
		if av.k != svLin || x.MemBytes != 8 {
			return t, false
		}
		v = sym{k: svLoad, c: av.c, s: av.s, size: 8}
	default:
		return t, false
	}
	switch {
	case v.k == svSum && v.size == 4 && v.signed && v.s == 4:
		t.rel, t.base = true, uint64(v.add)
	case v.k == svLoad && v.size == 8 && v.s == 8:
	default:
		return t, false
	}
	t.table, t.count = uint64(v.c), int(d.count)
	return t, true
}

// bound applies the range check cmp $N, X.
func (d *dispatch) bound(x *x86asm.Inst) bool {
	switch a := x.Args[0].(type) {
	case x86asm.Reg:
		f, w, ok := gpr(a)
		if !ok {
			return false
		}
		old := d.reg[f]
		idx := sym{k: svLin, s: 1}
		switch {
		case w == 8:
		case w == 4 && (old.k == svZext || old.k == svLin && d.fits(old, 32)):
		case w == 4 && old.k == svUnknown && old.id >= 1 && old.id <= nGPR && d.zext != nil && d.zext(f):
			// The path's incoming value was written as 32 bits on every path.
		default:
			idx = sym{k: svLow, size: w}
		}
		d.reg[f] = idx
		// Copies of the compared value made before the check are bounded too:
		// 64-bit copies share its identity, zero-extended 32-bit copies carry
		// its identity with zextID.
		if old.id > 0 && (old.k == svUnknown || old.k == svZext) {
			kind, id := old.k, old.id
			if w == 4 && old.k == svUnknown {
				kind, id = svZext, old.id|zextID
			} else if w != 8 && w != 4 {
				kind = 0xff
			}
			for g := range d.reg {
				if g != f && d.reg[g].k == kind && d.reg[g].id == id {
					d.reg[g] = sym{k: svLin, s: 1}
				}
			}
		}
	case x86asm.Mem:
		if x.MemBytes != 4 && x.MemBytes != 8 {
			return false
		}
		m := a
		d.slot, d.slotW = &m, x.MemBytes
	default:
		return false
	}
	d.bounded = true
	return true
}

// step executes one instruction of the dispatch sequence.
func (d *dispatch) step(x *x86asm.Inst, fi *finst, t *tableMatch) bool {
	dstReg, dstIsReg := x.Args[0].(x86asm.Reg)
	_, dstIsMem := x.Args[0].(x86asm.Mem)
	switch x.Op {
	case x86asm.NOP, x86asm.CMP, x86asm.TEST:
		return true
	case x86asm.MOV, x86asm.MOVSXD, x86asm.MOVZX, x86asm.MOVSX:
		if dstIsMem {
			d.slot = nil
			return true
		}
		if !dstIsReg {
			return false
		}
		_, dw, ok := gpr(dstReg)
		if !ok {
			return false
		}
		var v sym
		switch src := x.Args[1].(type) {
		case x86asm.Imm:
			v = sym{k: svLin, c: int64(src)}
			if dw == 4 {
				v.c = int64(uint32(src))
			}
		case x86asm.Reg:
			v = d.read(src)
			if sf, sw, ok := gpr(src); ok && (x.Op == x86asm.MOVSXD || x.Op == x86asm.MOVSX || x.Op == x86asm.MOVZX) {
				v = d.extend(d.reg[sf], sw, x.Op != x86asm.MOVZX)
			}
		case x86asm.Mem:
			if d.slot != nil && *d.slot == src && x.MemBytes == d.slotW && (dw == 4 || dw == 8) && x.Op == x86asm.MOV {
				v = sym{k: svLin, s: 1}
				t.loadAddr = fi.addr
				break
			}
			av := d.addr(src, &fi.in)
			if av.k != svLin {
				v = d.fresh()
				break
			}
			v = sym{k: svLoad, c: av.c, s: av.s, size: x.MemBytes, signed: x.Op == x86asm.MOVSXD || x.Op == x86asm.MOVSX}
			t.loadAddr = fi.addr
		default:
			return false
		}
		d.write(dstReg, v)
		return true
	case x86asm.CDQE:
		d.reg[rAX] = d.extend(d.reg[rAX], 4, true)
		return true
	case x86asm.LEA:
		m, ok := x.Args[1].(x86asm.Mem)
		if !ok || !dstIsReg {
			return false
		}
		v := d.addr(m, &fi.in)
		if v.k != svLin {
			v = d.fresh()
		}
		if _, w, _ := gpr(dstReg); w != 8 && v.k == svLin && !d.fits(v, 32) {
			v = d.fresh()
		}
		d.write(dstReg, v)
		return true
	case x86asm.ADD:
		if !dstIsReg {
			return false
		}
		if _, w, _ := gpr(dstReg); w != 8 {
			d.write(dstReg, d.fresh())
			return true
		}
		a := d.read(dstReg)
		var c sym
		switch src := x.Args[1].(type) {
		case x86asm.Reg:
			if _, w, _ := gpr(src); w != 8 {
				return false
			}
			c = d.read(src)
		case x86asm.Imm:
			c = sym{k: svLin, c: int64(src)}
		default:
			d.write(dstReg, d.fresh())
			return true
		}
		d.write(dstReg, addSym(a, c, d))
		return true
	case x86asm.SHL:
		sh, ok := x.Args[1].(x86asm.Imm)
		if !dstIsReg || !ok || sh < 0 || sh > 8 {
			break
		}
		if _, w, _ := gpr(dstReg); w == 8 {
			v := d.read(dstReg)
			if v.k == svLin {
				v.c <<= uint(sh)
				v.s <<= uint(sh)
				d.write(dstReg, v)
				return true
			}
		}
	}
	// Anything else: forget what it writes; give up on what we cannot model.
	switch x.Op {
	case x86asm.CALL, x86asm.LCALL, x86asm.SYSCALL:
		return false
	case x86asm.PUSH, x86asm.PUSHF, x86asm.PUSHFQ, x86asm.ENTER:
		d.slot = nil // writes the stack
	}
	w := gprWrites(x)
	for f := 0; f < nGPR; f++ {
		if w&famBit(f) != 0 {
			d.reg[f] = d.fresh()
			if d.slot != nil && (gprFam(d.slot.Base) == f || gprFam(d.slot.Index) == f) {
				d.slot = nil
			}
		}
	}
	if dstIsReg && !noDestWrite[x.Op] {
		if f, w, ok := gpr(dstReg); ok && w == 4 {
			d.reg[f] = sym{k: svZext, id: d.fresh().id} // 32-bit results zero-extend
		}
	}
	if _, i, ok := memArg(x); ok && (i == 0 && !noDestWrite[x.Op] || x.Op == x86asm.XCHG || x.Op == x86asm.XADD || x.Op == x86asm.CMPXCHG) {
		d.slot = nil // the instruction may write memory
	}
	return true
}

func gprFam(r x86asm.Reg) int {
	if f, _, ok := gpr(r); ok {
		return f
	}
	return -1
}

// extend sign- or zero-extends the low `from` bytes of v.
func (d *dispatch) extend(v sym, from int, signed bool) sym {
	switch v.k {
	case svLin:
		if d.fits(v, uint(8*from-1)) {
			return v
		}
	case svLow:
		if v.size >= from && d.count-1 < int64(1)<<(8*from-1) {
			return sym{k: svLin, s: 1}
		}
	case svLoad:
		if v.size == from {
			v.signed = signed
			return v
		}
	case svZext:
		if !signed && from == 4 {
			return v
		}
	}
	return d.fresh()
}

func addSym(a, c sym, d *dispatch) sym {
	switch {
	case a.k == svLin && c.k == svLin:
		return sym{k: svLin, c: a.c + c.c, s: a.s + c.s}
	case a.k == svLoad && c.k == svLin && c.s == 0:
		a.k, a.add = svSum, c.c
		return a
	case c.k == svLoad && a.k == svLin && a.s == 0:
		c.k, c.add = svSum, a.c
		return c
	}
	return d.fresh()
}

// readTable reads and validates the table's entries: they must be in a
// read-only section and every target must be code.
func (b *Binary) readTable(t *tableMatch) bool {
	f := b.File
	s := sectionAt(f, t.table)
	if s == nil || s.Flags&elf.SHF_WRITE != 0 {
		return false
	}
	t.sec = s.Name
	size := uint64(8)
	if t.rel {
		size = 4
	}
	raw, err := f.Bytes(t.table, uint64(t.count)*size)
	if err != nil || t.table+uint64(t.count)*size > s.Addr+s.Size {
		return false
	}
	t.targets = make([]uint64, 0, t.count)
	for k := 0; k < t.count; k++ {
		var dst uint64
		if t.rel {
			dst = t.base + uint64(int64(int32(binary.LittleEndian.Uint32(raw[4*k:]))))
		} else {
			dst = binary.LittleEndian.Uint64(raw[8*k:])
		}
		if !b.isCode(dst) {
			return false
		}
		t.targets = append(t.targets, dst)
	}
	return true
}

// ---- pointer jumps ----

// pointerJump decides whether jmp j transfers to a whole code pointer (see
// ijPointer) by following every path back to the definitions of its target
// register. It returns a description of the sources, or why it could not.
func (b *Binary) pointerJump(fc *fcode, j int) (bool, string) {
	x := fc.x(j)
	if x == nil {
		return false, "x86asm cannot read the jmp's operand"
	}
	switch a := x.Args[0].(type) {
	case x86asm.Mem:
		if x.MemBytes != 8 {
			return false, "jmp through a memory operand that is not 8 bytes"
		}
		if a.Base == x86asm.RIP {
			slot := fc.insts[j].in.RIPTarget
			where := "no section"
			if s := sectionAt(b.File, slot); s != nil {
				where = s.Name
			}
			return true, fmt.Sprintf("tail call through the pointer at %#x (%s)", slot, where)
		}
		if f := gprFam(a.Base); f == rSP || f == rBP && !(&walker{b: b, home: fc}).notStack(loc{fc, j}, rBP) {
			return false, "jmp through a stack slot (a spilled value whose origin is not followed)"
		}
		return true, "jmp through a code pointer loaded from memory"
	case x86asm.Reg:
		f, w, ok := gpr(a)
		if !ok || w != 8 {
			return false, "jmp through a register narrower than 64 bits"
		}
		return b.pointerReg(fc, j, f)
	}
	return false, "unexpected jmp operand"
}

// loc is one instruction of a (possibly other) function during a backward walk.
type loc struct {
	fc *fcode
	i  int
}

type walkItem struct {
	fn, i, fam int
}

// walker follows control flow backwards from an indirect jmp, across the
// function's split fragments when their branches lead back into it (those
// are decoded once per home function, in home.others).
type walker struct {
	b    *Binary
	home *fcode
}

const maxWalkFuncs = 16

func (w *walker) fcode(idx int) *fcode {
	if idx == w.home.idx {
		return w.home
	}
	if fc := w.home.others[idx]; fc != nil {
		return fc
	}
	if w.home.others == nil {
		w.home.others = map[int]*fcode{}
	}
	if len(w.home.others) >= maxWalkFuncs {
		return nil
	}
	fc := w.b.loadFunc(idx)
	w.home.others[idx] = fc
	return fc
}

// preds returns where control may come from into instruction i of fc. entry
// reports that i is the function's entry, so a caller's values also arrive.
// why is non-empty when some way in is unknown.
func (w *walker) preds(fc *fcode, i int) (ps []loc, entry bool, why string) {
	b := w.b
	a := fc.insts[i].addr
	switch {
	case i == 0:
		entry = true
	case b.isStart(a):
		return nil, false, fmt.Sprintf("%#x is another function's entry", a)
	}
	if b.isPad(a) {
		return nil, false, fmt.Sprintf("%#x is an exception landing pad", a)
	}
	if i > 0 {
		prev := &fc.insts[i-1]
		if prev.in.FallsThrough() && prev.addr+uint64(prev.in.Len) == a {
			ps = append(ps, loc{fc, i - 1})
		}
	}
	viaIndirect := false
	b.edges.in(a, a+1, func(e *edge) bool {
		switch e.kind {
		case ekBranch, ekTable:
			g := fc
			if e.src < fc.fn.Addr || e.src >= fc.fn.End() {
				if entry && !maybeFragment(fc.fn) {
					// A tail call from another function: the values a
					// caller passes, like a call's.
					return true
				}
				gi := b.funcAt(e.src)
				if gi < 0 {
					why = fmt.Sprintf("%#x is reached from %#x, outside every function", a, e.src)
					return false
				}
				if g = w.fcode(gi); g == nil {
					why = fmt.Sprintf("%#x is reached from too many other functions", a)
					return false
				}
			}
			k := g.find(e.src)
			if k < 0 {
				why = fmt.Sprintf("%#x is reached from %#x, which is not an instruction boundary", a, e.src)
				return false
			}
			ps = append(ps, loc{g, k})
			return true
		case ekCall:
			if entry {
				return true
			}
		case ekData, ekReloc, ekLea, ekImm:
			// An address-taken label (computed goto): GNU C only lets the
			// function's own indirect jmps go there.
			if len(fc.ijs) > 0 {
				viaIndirect = true
				return true
			}
		}
		why = fmt.Sprintf("%#x is reached by a %s edge from %#x", a, e.kind, e.src)
		return false
	})
	if why != "" {
		return nil, false, why
	}
	if viaIndirect {
		for _, k := range fc.ijs {
			ps = append(ps, loc{fc, k})
		}
	}
	if len(ps) == 0 && !entry {
		// Alignment padding after a jmp/ret that nothing targets is dead:
		// no value flows through it.
		if fc.insts[i].in.pad {
			return nil, false, ""
		}
		// Reached by no direct branch, table entry or address taken: only an
		// indirect jmp of this function can get here (a table being
		// resolved, or an unresolved one that keeps the function from
		// optimization anyway), so its predecessors are those jmps.
		if len(fc.ijs) == 0 {
			return nil, false, fmt.Sprintf("no known way to reach %#x", a)
		}
		for _, k := range fc.ijs {
			ps = append(ps, loc{fc, k})
		}
	}
	return ps, entry, ""
}

func (b *Binary) pointerReg(fc *fcode, j, fam int) (bool, string) {
	w := &walker{b: b, home: fc}
	seen := map[walkItem]bool{}
	type item struct {
		l   loc
		fam int
	}
	stack := []item{{loc{fc, j}, fam}}
	var loads, consts, calls, entry int
	for budget := 20000; len(stack) > 0; budget-- {
		if budget == 0 {
			return false, "too many paths to follow back from the jmp"
		}
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		key := walkItem{it.l.fc.idx, it.l.i, it.fam}
		if seen[key] || fc.good[key] {
			continue
		}
		seen[key] = true
		preds, isEntry, why := w.preds(it.l.fc, it.l.i)
		if why != "" {
			return false, why
		}
		if isEntry {
			entry++ // the value a caller passed in
		}
		for _, pl := range preds {
			xp := pl.fc.x(pl.i)
			pa := pl.fc.insts[pl.i].addr
			if xp == nil {
				return false, fmt.Sprintf("x86asm cannot read the instruction at %#x on a path to the jmp", pa)
			}
			if gprWrites(xp)&famBit(it.fam) == 0 {
				stack = append(stack, item{pl, it.fam})
				continue
			}
			dst, _ := xp.Args[0].(x86asm.Reg)
			df, dw, dok := gpr(dst)
			full := dok && df == it.fam && dw == 8
			switch {
			case xp.Op == x86asm.CALL:
				if it.fam != rAX {
					return false, fmt.Sprintf("the target register is clobbered by the call at %#x", pa)
				}
				calls++
			case xp.Op == x86asm.MOV && dok && df == it.fam && dw == 4 && isImm(xp.Args[1]):
				consts++ // mov $imm32,%e: a zero-extended constant (non-PIE code addresses)
			case xp.Op == x86asm.MOV && full:
				switch src := xp.Args[1].(type) {
				case x86asm.Mem:
					if stackMem(w, pl, src) {
						// A spill slot may hold a value computed from a
						// table: we do not follow values through memory.
						return false, fmt.Sprintf("the target is reloaded from the stack slot at %#x (a spilled value whose origin is not followed)", pa)
					}
					loads++
				case x86asm.Reg:
					sf, sw, ok := gpr(src)
					if !ok || sw != 8 {
						return false, fmt.Sprintf("the target register is set from a non-GPR at %#x", pa)
					}
					stack = append(stack, item{pl, sf})
				case x86asm.Imm:
					consts++
				default:
					return false, fmt.Sprintf("unexpected mov at %#x", pa)
				}
			case isCMOV(xp.Op) && full:
				stack = append(stack, item{pl, it.fam}) // condition false: the old value
				switch src := xp.Args[1].(type) {
				case x86asm.Mem:
					if stackMem(w, pl, src) {
						return false, fmt.Sprintf("the target is reloaded from the stack slot at %#x (a spilled value whose origin is not followed)", pa)
					}
					loads++
				case x86asm.Reg:
					sf, sw, ok := gpr(src)
					if !ok || sw != 8 {
						return false, fmt.Sprintf("cmov from a narrow register at %#x", pa)
					}
					stack = append(stack, item{pl, sf})
				}
			case full && isPointerGuard(xp):
				// glibc's PTR_DEMANGLE (ror $0x11; xor %fs:0x30): a bijection
				// undoing PTR_MANGLE of a stored code pointer.
				stack = append(stack, item{pl, it.fam})
			default:
				return false, fmt.Sprintf("the target is computed by %s at %#x", strings.ToLower(xp.Op.String()), pa)
			}
		}
	}
	if fc.good == nil {
		fc.good = map[walkItem]bool{}
	}
	for k := range seen {
		fc.good[k] = true
	}
	var parts []string
	if loads > 0 {
		parts = append(parts, "loaded from memory")
	}
	if calls > 0 {
		parts = append(parts, "returned by a call")
	}
	if entry > 0 {
		parts = append(parts, "passed in by the caller")
	}
	if consts > 0 {
		parts = append(parts, "a constant")
	}
	return true, "jmp to a code pointer " + strings.Join(parts, ", ")
}

// stackMem reports whether memory operand m of instruction l may be a stack
// slot: it is based on %rsp, or on %rbp unless %rbp holds an ordinary
// (non-stack) pointer there on every path (code built with
// -fomit-frame-pointer uses %rbp as a general register).
func stackMem(w *walker, l loc, m x86asm.Mem) bool {
	switch gprFam(m.Base) {
	case rSP:
		return true
	case rBP:
		return !w.notStack(l, rBP)
	}
	return false
}

// notStack reports whether register fam holds a value that does not point
// into the stack on entry to instruction start, on every path: each reaching
// definition is a 64-bit load through such a pointer (or %rip, or an
// absolute address), a copy of such a register, an immediate, a %rip-relative
// lea, a call's return value, an argument, or such a pointer adjusted by a
// constant. %rsp, pop, the caller's %rbp or %rsp (a frame pointer) and
// anything else make it answer false: when unsure, the slot is a stack slot.
func (w *walker) notStack(start loc, fam int) bool {
	type item struct {
		l   loc
		fam int
	}
	seen := map[walkItem]bool{}
	stack := []item{{start, fam}}
	for budget := 4096; len(stack) > 0; budget-- {
		if budget == 0 {
			return false
		}
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		key := walkItem{it.l.fc.idx, it.l.i, it.fam}
		if seen[key] {
			continue
		}
		seen[key] = true
		preds, entry, why := w.preds(it.l.fc, it.l.i)
		if why != "" || entry && (it.fam == rSP || it.fam == rBP) {
			return false
		}
		// follow requires register r (of an address or a copy) to be a
		// non-stack value before instruction p.
		follow := func(p loc, r x86asm.Reg) bool {
			f, fw, ok := gpr(r)
			if !ok || fw != 8 || f == rSP {
				return false
			}
			stack = append(stack, item{p, f})
			return true
		}
		for _, p := range preds {
			xp := p.fc.x(p.i)
			if xp == nil {
				return false
			}
			if gprWrites(xp)&famBit(it.fam) == 0 {
				stack = append(stack, item{p, it.fam})
				continue
			}
			dst, _ := xp.Args[0].(x86asm.Reg)
			if df, dw, ok := gpr(dst); !ok || df != it.fam || dw != 8 {
				if xp.Op == x86asm.CALL && it.fam == rAX {
					continue // a call's return value
				}
				return false
			}
			switch xp.Op {
			case x86asm.MOV, x86asm.LEA:
				switch src := xp.Args[1].(type) {
				case x86asm.Imm:
				case x86asm.Reg:
					if xp.Op != x86asm.MOV || !follow(p, src) {
						return false
					}
				case x86asm.Mem:
					if src.Segment != 0 || src.Base == x86asm.RIP && !p.fc.insts[p.i].in.RIPRel {
						return false
					}
					if src.Base != 0 && src.Base != x86asm.RIP && !follow(p, src.Base) {
						return false
					}
					// An index with scale 1 may be the pointer; a scaled
					// one is an offset.
					if src.Index != 0 && src.Scale == 1 && !follow(p, src.Index) {
						return false
					}
				default:
					return false
				}
			case x86asm.ADD, x86asm.SUB:
				if !isImm(xp.Args[1]) {
					return false
				}
				stack = append(stack, item{p, it.fam})
			default:
				return false
			}
		}
	}
	return true
}

func isCMOV(op x86asm.Op) bool {
	switch op {
	case x86asm.CMOVA, x86asm.CMOVAE, x86asm.CMOVB, x86asm.CMOVBE, x86asm.CMOVE, x86asm.CMOVG, x86asm.CMOVGE,
		x86asm.CMOVL, x86asm.CMOVLE, x86asm.CMOVNE, x86asm.CMOVNO, x86asm.CMOVNP, x86asm.CMOVNS, x86asm.CMOVO,
		x86asm.CMOVP, x86asm.CMOVS:
		return true
	}
	return false
}

// IndirectJump describes one indirect jmp and what the analysis knows about
// its targets.
type IndirectJump struct {
	Addr   uint64 `json:"addr"`
	Func   string `json:"func"`
	Class  string `json:"class"` // "jump table", "pointer jump" or "unresolved"
	Detail string `json:"detail"`
}

// IndirectJumps lists every indirect jmp of every function, in address order.
func (b *Binary) IndirectJumps() []IndirectJump {
	var out []IndirectJump
	for i := range b.info {
		for _, ij := range b.info[i].jumps {
			out = append(out, IndirectJump{Addr: ij.addr, Func: b.Funcs.List[i].Name, Class: ij.class.String(), Detail: ij.detail})
		}
	}
	return out
}

// isPointerGuard recognises the two halves of glibc's pointer demangling:
// rotation by a constant, and xor with the thread's pointer guard %fs:0x30.
func isPointerGuard(x *x86asm.Inst) bool {
	switch x.Op {
	case x86asm.ROR, x86asm.ROL:
		_, ok := x.Args[1].(x86asm.Imm)
		return ok
	case x86asm.XOR:
		m, ok := x.Args[1].(x86asm.Mem)
		return ok && m.Segment == x86asm.FS && m.Base == 0 && m.Index == 0 && m.Disp == 0x30
	}
	return false
}

// constReg returns the value register fam holds on entry to instruction i
// when every path there sets it with lea X(%rip) or mov $X to the same X.
func (b *Binary) constReg(fc *fcode, i, fam int) (int64, bool) {
	w := &walker{b: b, home: fc}
	seen := map[walkItem]bool{}
	stack := []loc{{fc, i}}
	var val int64
	found := false
	for budget := 4096; len(stack) > 0; budget-- {
		if budget == 0 {
			return 0, false
		}
		l := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		key := walkItem{l.fc.idx, l.i, fam}
		if seen[key] {
			continue
		}
		seen[key] = true
		preds, entry, why := w.preds(l.fc, l.i)
		if why != "" || entry {
			return 0, false // unknown, or the caller's value
		}
		for _, p := range preds {
			xp := p.fc.x(p.i)
			if xp == nil {
				return 0, false
			}
			if gprWrites(xp)&famBit(fam) == 0 {
				stack = append(stack, p)
				continue
			}
			dst, _ := xp.Args[0].(x86asm.Reg)
			if df, dw, ok := gpr(dst); !ok || df != fam || dw != 8 {
				return 0, false
			}
			var v int64
			switch src := xp.Args[1].(type) {
			case x86asm.Mem:
				in := &p.fc.insts[p.i].in
				if xp.Op != x86asm.LEA || src.Base != x86asm.RIP || src.Index != 0 || !in.RIPRel {
					return 0, false
				}
				v = int64(in.RIPTarget)
			case x86asm.Imm:
				if xp.Op != x86asm.MOV {
					return 0, false
				}
				v = int64(src)
			default:
				return 0, false
			}
			if found && v != val {
				return 0, false
			}
			val, found = v, true
		}
	}
	return val, found
}

// zextReg reports whether register fam has its upper 32 bits clear on entry
// to instruction i: every reaching definition writes its 32-bit (or a
// zero-extending narrower) form.
func (b *Binary) zextReg(fc *fcode, i, fam int) bool {
	w := &walker{b: b, home: fc}
	seen := map[walkItem]bool{}
	stack := []loc{{fc, i}}
	for budget := 4096; len(stack) > 0; budget-- {
		if budget == 0 {
			return false
		}
		l := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		key := walkItem{l.fc.idx, l.i, fam}
		if seen[key] {
			continue
		}
		seen[key] = true
		preds, entry, why := w.preds(l.fc, l.i)
		if why != "" || entry {
			return false
		}
		for _, p := range preds {
			xp := p.fc.x(p.i)
			if xp == nil {
				return false
			}
			if gprWrites(xp)&famBit(fam) == 0 {
				stack = append(stack, p)
				continue
			}
			dst, _ := xp.Args[0].(x86asm.Reg)
			df, dw, ok := gpr(dst)
			if !ok || df != fam || noDestWrite[xp.Op] || xp.Op == x86asm.XCHG || xp.Op == x86asm.XADD || xp.Op == x86asm.CMPXCHG {
				return false
			}
			switch {
			case dw == 4:
			case dw == 8 && xp.Op == x86asm.MOVZX:
			default:
				return false
			}
		}
	}
	return true
}

func isImm(a x86asm.Arg) bool {
	_, ok := a.(x86asm.Imm)
	return ok
}

// maybeFragment reports whether a function may be a split part of another
// (GCC's foo.cold), whose entry is reached by jumps carrying the parent's
// values rather than by calls: named .cold, or known only from .eh_frame.
func maybeFragment(fn *elfio.Func) bool {
	return fn.Source == elfio.FromEHFrame || strings.Contains(fn.Name, ".cold")
}
