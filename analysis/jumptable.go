package analysis

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"strings"

	"golang.org/x/arch/x86/x86asm"

	"github.com/kprewrite/kprewrite/internal/x86dec"
)

// Jump tables: a symbolic run of the instructions before an indirect jmp that
// recognises the GCC/Clang table dispatch patterns, bounds the index and reads the
// table's entries.

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
		r, ok := b.runPath(fc, j, p, false)
		if !ok {
			// the index may be a 32-bit copy, made before the path, of the register
			// the bound is checked on (glibc: mov %ebp,%edi before a loop, then cmp
			// $0xc,%ebp; ja and the table indexed by %rdi)
			r, ok = b.runPath(fc, j, p, true)
		}
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
func (b *Binary) runPath(fc *fcode, j int, p tablePath, copies bool) (tableMatch, bool) {
	var t tableMatch
	d := &dispatch{count: p.count}
	d.resolve = func(fam int) (int64, bool) { return b.constReg(fc, p.pre[0], fam) }
	d.zext = func(fam int) bool { return b.zextReg(fc, p.pre[0], fam) }
	t.jccName = p.jccName
	t.cmpAddr, t.jccAddr = fc.insts[p.cmp].addr, fc.insts[p.jcc].addr
	for f := range d.reg {
		d.reg[f] = d.fresh()
	}
	if copies { // registers that hold a 32-bit copy of another on every path in
		for f := range d.reg {
			if src, ok := b.copyOf(fc, p.pre[0], f); ok {
				d.reg[f] = sym{k: svZext, id: d.reg[src].id | zextID}
			}
		}
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
