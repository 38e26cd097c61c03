package analysis

import "golang.org/x/arch/x86/x86asm"

// General-purpose register families, numbered as in the ModRM encoding.
const (
	rAX = iota
	rCX
	rDX
	rBX
	rSP
	rBP
	rSI
	rDI
	nGPR = 16
)

// gpr returns the family (0-15) and width in bytes of a general-purpose
// register, or ok=false.
func gpr(r x86asm.Reg) (fam int, width int, ok bool) {
	switch {
	case r >= x86asm.AL && r <= x86asm.R15B:
		i := int(r - x86asm.AL)
		switch {
		case i < 4:
			return i, 1, true
		case i < 8: // ah, ch, dh, bh
			return i - 4, 1, true
		case i < 12: // spl, bpl, sil, dil
			return i - 4, 1, true
		default:
			return i - 4, 1, true
		}
	case r >= x86asm.AX && r <= x86asm.R15W:
		return int(r - x86asm.AX), 2, true
	case r >= x86asm.EAX && r <= x86asm.R15L:
		return int(r - x86asm.EAX), 4, true
	case r >= x86asm.RAX && r <= x86asm.R15:
		return int(r - x86asm.RAX), 8, true
	}
	return 0, 0, false
}

// regMask is a set of register families.
type regMask uint16

func famBit(f int) regMask { return 1 << uint(f) }

// callClobbers are the SysV caller-saved registers a call may change.
const callClobbers = 1<<rAX | 1<<rCX | 1<<rDX | 1<<rSI | 1<<rDI | 1<<8 | 1<<9 | 1<<10 | 1<<11 | 1<<rSP

// noDestWrite lists ops whose first operand is read, not written.
var noDestWrite = map[x86asm.Op]bool{
	x86asm.CMP: true, x86asm.TEST: true, x86asm.BT: true, x86asm.PUSH: true,
	x86asm.JMP: true, x86asm.CALL: true, x86asm.OUT: true, x86asm.PTEST: true,
	x86asm.UCOMISS: true, x86asm.UCOMISD: true, x86asm.COMISS: true, x86asm.COMISD: true,
	x86asm.NOP: true, x86asm.PREFETCHNTA: true, x86asm.PREFETCHT0: true, x86asm.PREFETCHT1: true,
	x86asm.PREFETCHT2: true, x86asm.PREFETCHW: true, x86asm.CLFLUSH: true, x86asm.VERR: true, x86asm.VERW: true,
}

// gprWrites returns the register families an instruction may write. It is
// deliberately generous: the jump-table and pointer analyses only ever lose
// precision (never safety) by seeing a write that does not happen.
func gprWrites(xi *x86asm.Inst) regMask {
	var m regMask
	addArg := func(a x86asm.Arg) {
		if r, ok := a.(x86asm.Reg); ok {
			if f, _, ok := gpr(r); ok {
				m |= famBit(f)
			}
		}
	}
	switch xi.Op {
	case x86asm.CDQE, x86asm.CWDE, x86asm.CBW, x86asm.LAHF, x86asm.XLATB:
		m |= famBit(rAX)
	case x86asm.CQO, x86asm.CDQ, x86asm.CWD:
		m |= famBit(rDX)
	case x86asm.MUL, x86asm.DIV, x86asm.IDIV:
		m |= famBit(rAX) | famBit(rDX)
	case x86asm.IMUL:
		if xi.Args[1] == nil {
			m |= famBit(rAX) | famBit(rDX)
		}
	case x86asm.XCHG, x86asm.XADD:
		addArg(xi.Args[1])
	case x86asm.CMPXCHG:
		m |= famBit(rAX)
	case x86asm.CMPXCHG8B, x86asm.CMPXCHG16B, x86asm.RDTSC, x86asm.XGETBV, x86asm.RDPMC, x86asm.RDMSR:
		m |= famBit(rAX) | famBit(rDX)
	case x86asm.RDTSCP:
		m |= famBit(rAX) | famBit(rDX) | famBit(rCX)
	case x86asm.CPUID:
		m |= famBit(rAX) | famBit(rBX) | famBit(rCX) | famBit(rDX)
	case x86asm.PUSH, x86asm.POP, x86asm.PUSHF, x86asm.POPF, x86asm.PUSHFQ, x86asm.POPFQ, x86asm.PUSHFD, x86asm.POPFD:
		m |= famBit(rSP)
	case x86asm.LEAVE, x86asm.ENTER:
		m |= famBit(rSP) | famBit(rBP)
	case x86asm.CALL, x86asm.LCALL:
		m |= callClobbers
	case x86asm.SYSCALL, x86asm.SYSENTER:
		m |= famBit(rAX) | famBit(rCX) | famBit(11)
	case x86asm.LOOP, x86asm.LOOPE, x86asm.LOOPNE:
		m |= famBit(rCX)
	case x86asm.MOVSB, x86asm.MOVSW, x86asm.MOVSD, x86asm.MOVSQ, x86asm.CMPSB, x86asm.CMPSW, x86asm.CMPSD, x86asm.CMPSQ,
		x86asm.STOSB, x86asm.STOSW, x86asm.STOSD, x86asm.STOSQ, x86asm.LODSB, x86asm.LODSW, x86asm.LODSD, x86asm.LODSQ,
		x86asm.SCASB, x86asm.SCASW, x86asm.SCASD, x86asm.SCASQ, x86asm.INSB, x86asm.INSW, x86asm.INSD,
		x86asm.OUTSB, x86asm.OUTSW, x86asm.OUTSD:
		m |= famBit(rSI) | famBit(rDI) | famBit(rCX) | famBit(rAX)
	case x86asm.MULX:
		addArg(xi.Args[1])
	case x86asm.IN:
		m |= famBit(rAX)
	}
	if !noDestWrite[xi.Op] {
		addArg(xi.Args[0])
	}
	return m
}

// memArgs returns the first memory operand of xi, if any.
func memArg(xi *x86asm.Inst) (x86asm.Mem, int, bool) {
	for i, a := range xi.Args {
		if a == nil {
			break
		}
		if m, ok := a.(x86asm.Mem); ok {
			return m, i, true
		}
	}
	return x86asm.Mem{}, -1, false
}
