package analysis

import (
	"fmt"

	"golang.org/x/arch/x86/x86asm"
)

// Spilled jump targets: a function that keeps a code pointer in a stack slot across
// calls (glibc's gconv steps keep the demangled step function at (%rsp)) reloads it
// into a register before its indirect jmp. slotSources follows the slot back to the
// stores that fill it, so that pointerReg can follow the stored registers as it
// follows any other: the slot is only as good as every value stored into it.

// regAt is a register family's value just before instruction l runs.
type regAt struct {
	l   loc
	fam int
}

// slotSources returns the definitions of the 8-byte stack word at %rsp+off just before
// start runs: the registers stored into it (as regAt, their values before the store)
// and how many immediates, or why the slot cannot be followed. The stack pointer's
// moves are tracked (push, pop, add/sub/lea of a constant, calls); anything else that
// changes it, a store that covers part of the word, a store through a frame pointer
// that may alias it, the word being below the stack pointer across a call, or the
// function's entry (a slot the caller filled) gives up.
func (w *walker) slotSources(start loc, off int64) (regs []regAt, consts int, why string) {
	type key struct {
		fn, i int
		off   int64
	}
	type item struct {
		l   loc
		off int64
	}
	seen := map[key]bool{}
	stack := []item{{start, off}}
	for budget := 4096; len(stack) > 0; budget-- {
		if budget == 0 {
			return nil, 0, "too many paths to follow back from the stack slot"
		}
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		k := key{it.l.fc.idx, it.l.i, it.off}
		if seen[k] {
			continue
		}
		seen[k] = true
		preds, isEntry, why := w.preds(it.l.fc, it.l.i)
		if why != "" {
			return nil, 0, why
		}
		if isEntry {
			return nil, 0, "the stack slot may hold what the caller left there"
		}
		for _, pl := range preds {
			xp := pl.fc.x(pl.i)
			pa := pl.fc.insts[pl.i].addr
			if xp == nil {
				return nil, 0, fmt.Sprintf("x86asm cannot read the instruction at %#x on a path to the stack slot", pa)
			}
			d, ok := spDelta(xp)
			if !ok {
				return nil, 0, fmt.Sprintf("%s at %#x moves the stack pointer by an unknown amount", mnemonicX(xp), pa)
			}
			o := it.off + d // the word relative to %rsp before pl
			wlo, wn, writes := w.stackWrite(pl, xp)
			switch {
			case writes == stackWriteUnknown:
				return nil, 0, fmt.Sprintf("%s at %#x may write the stack slot through a frame pointer", mnemonicX(xp), pa)
			case writes == stackWriteNone || wlo >= o+8 || wlo+wn <= o:
				if xp.Op == x86asm.CALL && o < 0 {
					return nil, 0, fmt.Sprintf("the stack slot is below the stack pointer at the call at %#x", pa)
				}
				stack = append(stack, item{pl, o})
			case wlo == o && wn == 8 && (xp.Op == x86asm.MOV || xp.Op == x86asm.PUSH):
				src := xp.Args[1]
				if xp.Op == x86asm.PUSH {
					src = xp.Args[0]
				}
				switch s := src.(type) {
				case x86asm.Reg:
					f, width, ok := gpr(s)
					if !ok || width != 8 {
						return nil, 0, fmt.Sprintf("the stack slot is stored from a non-GPR at %#x", pa)
					}
					regs = append(regs, regAt{pl, f})
				case x86asm.Imm:
					consts++
				default:
					return nil, 0, fmt.Sprintf("the stack slot is stored from memory at %#x", pa)
				}
			default:
				return nil, 0, fmt.Sprintf("%s at %#x writes part of the stack slot", mnemonicX(xp), pa)
			}
		}
	}
	return regs, consts, ""
}

// spDelta is how much instruction xi moves the stack pointer, as seen after it
// completes (a call's callee returns it where it was).
func spDelta(xi *x86asm.Inst) (int64, bool) {
	if gprWrites(xi)&famBit(rSP) == 0 {
		return 0, true
	}
	dst, _ := xi.Args[0].(x86asm.Reg)
	switch xi.Op {
	case x86asm.CALL:
		return 0, true
	case x86asm.PUSH, x86asm.PUSHFQ:
		if xi.DataSize == 16 {
			return 0, false
		}
		return -8, true
	case x86asm.POP, x86asm.POPFQ:
		if xi.DataSize == 16 || gprFam(dst) == rSP {
			return 0, false
		}
		return 8, true
	case x86asm.ADD, x86asm.SUB:
		imm, ok := xi.Args[1].(x86asm.Imm)
		if gprFam(dst) != rSP || !ok {
			return 0, false
		}
		if xi.Op == x86asm.SUB {
			return -int64(imm), true
		}
		return int64(imm), true
	case x86asm.LEA:
		m, ok := xi.Args[1].(x86asm.Mem)
		if gprFam(dst) != rSP || !ok || gprFam(m.Base) != rSP || m.Index != 0 {
			return 0, false
		}
		return m.Disp, true
	}
	return 0, false
}

type stackWriteKind uint8

const (
	stackWriteNone    stackWriteKind = iota
	stackWriteAt                     // [lo, lo+n) relative to %rsp before the instruction
	stackWriteUnknown                // through %rbp that may point into the stack
)

// stackWrite says which stack bytes instruction l (xi) writes, relative to %rsp before
// it: a push's word, or a store whose address is %rsp plus a constant. Stores through
// other registers are taken to miss the stack, as pointerReg takes loads through them
// to read no spill slot, except through a %rbp that may be a frame pointer.
func (w *walker) stackWrite(l loc, xi *x86asm.Inst) (lo, n int64, kind stackWriteKind) {
	switch xi.Op {
	case x86asm.PUSH, x86asm.PUSHFQ:
		return -8, 8, stackWriteAt
	case x86asm.CALL:
		return -8, 8, stackWriteAt // the return address, below the slots above %rsp
	}
	m, i, ok := memArg(xi)
	if !ok || i != 0 || noDestWrite[xi.Op] {
		return 0, 0, stackWriteNone
	}
	size := int64(xi.MemBytes)
	if size <= 0 {
		size = 64 // unknown width (xsave and the like): as wide as any
	}
	switch gprFam(m.Base) {
	case rSP:
		if m.Index != 0 {
			return 0, 0, stackWriteUnknown
		}
		return m.Disp, size, stackWriteAt
	case rBP:
		if !w.notStack(l, rBP) {
			return 0, 0, stackWriteUnknown
		}
	}
	return 0, 0, stackWriteNone
}

// mnemonicX names an x86asm instruction for reasons.
func mnemonicX(xi *x86asm.Inst) string { return fmt.Sprint(xi.Op) }
