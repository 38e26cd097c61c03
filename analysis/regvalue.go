package analysis

import (
	"golang.org/x/arch/x86/x86asm"
)

// Register values the analyses need: a constant loaded into a register, a
// zero-extended one.

// reachingDefs walks back from instruction i over every path into it and calls visit
// for each instruction on the way: writes says it writes register fam, which ends
// that path (its definition of fam). visit returns false to give up. reachingDefs
// reports whether every path ended at a definition visit accepted (a function entry,
// an unknown way in or too many paths fail).
func (b *Binary) reachingDefs(fc *fcode, i, fam int, visit func(p loc, xp *x86asm.Inst, writes bool) bool) bool {
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
			return false // unknown, or the caller's value
		}
		for _, p := range preds {
			xp := p.fc.x(p.i)
			if xp == nil {
				return false
			}
			writes := gprWrites(xp)&famBit(fam) != 0
			if !visit(p, xp, writes) {
				return false
			}
			if !writes {
				stack = append(stack, p)
			}
		}
	}
	return true
}

// constReg returns the value register fam holds on entry to instruction i
// when every path there sets it with lea X(%rip) or mov $X to the same X.
func (b *Binary) constReg(fc *fcode, i, fam int) (int64, bool) {
	var val int64
	found := false
	ok := b.reachingDefs(fc, i, fam, func(p loc, xp *x86asm.Inst, writes bool) bool {
		if !writes {
			return true
		}
		dst, _ := xp.Args[0].(x86asm.Reg)
		if df, dw, ok := gpr(dst); !ok || df != fam || dw != 8 {
			return false
		}
		var v int64
		switch src := xp.Args[1].(type) {
		case x86asm.Mem:
			in := &p.fc.insts[p.i].in
			if xp.Op != x86asm.LEA || src.Base != x86asm.RIP || src.Index != 0 || !in.RIPRel {
				return false
			}
			v = int64(in.RIPTarget)
		case x86asm.Imm:
			if xp.Op != x86asm.MOV {
				return false
			}
			v = int64(src)
		default:
			return false
		}
		if found && v != val {
			return false
		}
		val, found = v, true
		return true
	})
	return val, ok && found
}

// zextReg reports whether register fam has its upper 32 bits clear on entry
// to instruction i: every reaching definition writes its 32-bit (or a
// zero-extending narrower) form.
func (b *Binary) zextReg(fc *fcode, i, fam int) bool {
	return b.reachingDefs(fc, i, fam, func(_ loc, xp *x86asm.Inst, writes bool) bool {
		if !writes {
			return true
		}
		dst, _ := xp.Args[0].(x86asm.Reg)
		df, dw, ok := gpr(dst)
		if !ok || df != fam || noDestWrite[xp.Op] || xp.Op == x86asm.XCHG || xp.Op == x86asm.XADD || xp.Op == x86asm.CMPXCHG {
			return false
		}
		return dw == 4 || dw == 8 && xp.Op == x86asm.MOVZX
	})
}

// copyOf reports whether, on every path into instruction i of fc, register fam was
// last written by a 32-bit "mov %e<src>,%e<fam>" with one same src, which no
// instruction writes between that mov and i. It returns src.
func (b *Binary) copyOf(fc *fcode, i, fam int) (int, bool) {
	src := -1
	def := func(xp *x86asm.Inst) bool {
		dst, _ := xp.Args[0].(x86asm.Reg)
		from, _ := xp.Args[1].(x86asm.Reg)
		df, dw, ok1 := gpr(dst)
		sf, sw, ok2 := gpr(from)
		if xp.Op != x86asm.MOV || !ok1 || !ok2 || df != fam || dw != 4 || sw != 4 || sf == fam || (src >= 0 && sf != src) {
			return false
		}
		src = sf
		return true
	}
	// the first walk finds src from fam's definitions, the second also refuses src
	// written after one
	if !b.reachingDefs(fc, i, fam, func(_ loc, xp *x86asm.Inst, writes bool) bool { return !writes || def(xp) }) || src < 0 {
		return 0, false
	}
	ok := b.reachingDefs(fc, i, fam, func(_ loc, xp *x86asm.Inst, writes bool) bool {
		if !writes {
			return gprWrites(xp)&famBit(src) == 0
		}
		return def(xp)
	})
	return src, ok
}

func isImm(a x86asm.Arg) bool {
	_, ok := a.(x86asm.Imm)
	return ok
}
