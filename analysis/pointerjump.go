package analysis

import (
	"fmt"
	"strings"

	"golang.org/x/arch/x86/x86asm"

	"github.com/kprewrite/kprewrite/elfio"
)

// Pointer jumps: an indirect jmp through a register whose value is walked back
// through the function (and its callers' stack slots) to show it holds a code
// pointer the analysis indexes, not an address inside a DCR.

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
	var loads, consts, calls, entry, spills int
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
						// A spill slot may hold a value computed from a table:
						// follow it to its stores, and the stored registers back.
						regs, n, why := w.spilled(pl, src)
						if why != "" {
							return false, fmt.Sprintf("the target is reloaded from the stack slot at %#x (%s)", pa, why)
						}
						for _, r := range regs {
							stack = append(stack, item{r.l, r.fam})
						}
						consts += n
						spills++
						continue
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
	if spills > 0 {
		parts = append(parts, "kept in a stack slot in between")
	}
	return true, "jmp to a code pointer " + strings.Join(parts, ", ")
}

// spilled returns the definitions of the stack slot m that instruction l loads (see
// slotSources), or why they cannot be followed: only %rsp plus a constant is.
func (w *walker) spilled(l loc, m x86asm.Mem) ([]regAt, int, string) {
	if gprFam(m.Base) != rSP || m.Index != 0 || m.Segment != 0 {
		return nil, 0, "a spilled value whose origin is not followed"
	}
	return w.slotSources(l, m.Disp)
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

// maybeFragment reports whether a function may be a split part of another
// (GCC's foo.cold), whose entry is reached by jumps carrying the parent's
// values rather than by calls: named .cold, or known only from .eh_frame.
func maybeFragment(fn *elfio.Func) bool {
	return fn.Source == elfio.FromEHFrame || strings.Contains(fn.Name, ".cold")
}
