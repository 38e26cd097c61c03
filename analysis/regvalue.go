package analysis

import (
	"golang.org/x/arch/x86/x86asm"
)

// Register values the analyses need: a constant loaded into a register, a
// zero-extended one.

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

// copyOf reports whether, on every path into instruction i of fc, register fam was
// last written by a 32-bit "mov %e<src>,%e<fam>" with one same src, which no
// instruction writes between that mov and i. It returns src.
func (b *Binary) copyOf(fc *fcode, i, fam int) (int, bool) {
	src := -1
	// pass 1 finds src from fam's definitions; pass 2 also refuses src written after one
	for pass := 1; pass <= 2; pass++ {
		w := &walker{b: b, home: fc}
		seen := map[walkItem]bool{}
		stack := []loc{{fc, i}}
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
				return 0, false
			}
			for _, p := range preds {
				xp := p.fc.x(p.i)
				if xp == nil {
					return 0, false
				}
				wr := gprWrites(xp)
				if wr&famBit(fam) == 0 {
					if pass == 2 && wr&famBit(src) != 0 {
						return 0, false
					}
					stack = append(stack, p)
					continue
				}
				dst, _ := xp.Args[0].(x86asm.Reg)
				from, _ := xp.Args[1].(x86asm.Reg)
				df, dw, ok1 := gpr(dst)
				sf, sw, ok2 := gpr(from)
				if xp.Op != x86asm.MOV || !ok1 || !ok2 || df != fam || dw != 4 || sw != 4 || sf == fam || (src >= 0 && sf != src) {
					return 0, false
				}
				src = sf
			}
		}
		if src < 0 {
			return 0, false
		}
	}
	return src, true
}

func isImm(a x86asm.Arg) bool {
	_, ok := a.(x86asm.Imm)
	return ok
}
