package analysis

import (
	"debug/elf"
	"fmt"
	"path"
	"strings"
	"sync"

	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/internal/x86dec"
	"golang.org/x/arch/x86/x86asm"
)

// A return probe replaces the word at (%rsp) on entry, the return address, with the
// trampoline's address (kprobes.rst: kretprobes). A function that reads, pops or
// rewrites that word itself then sees the trampoline: setjmp saves it in the jmp_buf
// and longjmp jumps to the trampoline with no instance left; vfork pops it and pushes
// it back in both the child and the parent; libgcc's uw_init_context_1 starts the
// unwind from __builtin_return_address(0). returnSlotUse finds such code; the
// do-not-probe list names the functions it cannot judge.

// returnSlotUse walks the function from entry while the stack depth is known (pushes,
// pops, sub/add/lea of %rsp; direct jmps followed, into tail-called functions too; a
// conditional branch's fall-through is followed; the walk ends at a call, after which
// may come code of another depth) and reports the
// first instruction that accesses the return address slot through %rsp, pops it, or
// moves %rsp past it; and, when the walk saw a frame pointer set up
// (push %rbp; mov %rsp,%rbp), any instruction of the function that accesses the slot
// through %rbp (__builtin_return_address(0) at -O0, or with -fno-omit-frame-pointer).
// switched is true when the instruction found sets %rsp to a value that does not come
// from the stack pointer (stackSwitch): the function moves to another stack.
func (b *Binary) returnSlotUse(fi int, entry uint64) (at uint64, why string, switched bool) {
	fn := &b.Funcs.List[fi]
	if !b.Referenced(fn.Addr) {
		// only jumped to: a fragment of another function (a cold part with its own
		// FDE), entered with that function's frame on the stack, not a return address
		return 0, "", false
	}
	depth := int64(0)      // bytes below the return address slot
	frameAt := int64(-1)   // %rbp = %rsp at this depth (the slot is at depth(%rbp))
	frame := int64(-1)     // frameAt as it was set up, for frameSlotUse after the epilogue
	onStack := famBit(rSP) // the registers that hold an address derived from %rsp's
	pc, hops := entry, 0
	slotUse := func(fn *elfio.Func, frame int64) (uint64, string, bool) {
		at, why := b.frameSlotUse(fn, frame)
		return at, why, false
	}
	for steps := 0; steps < 2048; steps++ {
		code := b.codeFrom(pc)
		if code == nil {
			break
		}
		in, err := x86dec.DecodeFast(code, pc)
		if err != nil || in.Len <= 0 {
			break
		}
		xi, err := x86dec.Operands(code[:in.Len])
		if err != nil {
			break
		}
		if m, ok := accessedMem(&xi); ok && isSP(m.Base) && m.Index == 0 && m.Disp == depth {
			return pc, fmt.Sprintf("%s at %#x accesses the return address slot %#x(%%rsp)", strings.ToLower(xi.Op.String()), pc, depth), false
		}
		if src, ok := stackSwitch(&xi, onStack); ok {
			return pc, fmt.Sprintf("%s at %#x sets %%rsp from %s, not from the stack pointer: the function moves to another stack, where the word at its entry's %%rsp may be read as data and its return may never come", strings.ToLower(xi.Op.String()), pc, src), true
		}
		onStack = stackRegsAfter(&xi, onStack)
		switch xi.Op {
		case x86asm.RET, x86asm.IRETQ:
			return slotUse(fn, frame)
		case x86asm.POP, x86asm.POPFQ:
			if depth == 0 {
				return pc, fmt.Sprintf("pop at %#x takes the return address off the stack", pc), false
			}
			depth -= 8
			if r, ok := xi.Args[0].(x86asm.Reg); ok && r == x86asm.RBP {
				frameAt = -1
			}
		case x86asm.PUSH, x86asm.PUSHFQ:
			depth += 8
		case x86asm.CALL:
			// the callee may not return (abort, a throw): what follows may be another
			// block, reached at another depth
			return slotUse(fn, frame)
		case x86asm.LEAVE:
			if frameAt < 8 {
				return slotUse(fn, frame)
			}
			depth, frameAt = frameAt-8, -1
		case x86asm.JMP:
			if !in.Kind.IsDirectBranch() || hops == 4 {
				return slotUse(fn, frame)
			}
			hops++
			pc = in.Target
			continue
		default:
			if gprWrites(&xi)&famBit(rBP) != 0 {
				if xi.Op == x86asm.MOV && xi.Args[0] == x86asm.RBP && xi.Args[1] == x86asm.RSP {
					frameAt, frame = depth, depth
				} else {
					frameAt = -1
				}
			}
			if gprWrites(&xi)&famBit(rSP) != 0 {
				d, ok := spAdjust(&xi)
				if !ok {
					return slotUse(fn, frame) // %rsp no longer known
				}
				if depth += d; depth < 0 {
					return pc, fmt.Sprintf("%s at %#x moves the stack pointer past the return address", strings.ToLower(xi.Op.String()), pc), false
				}
			}
		}
		pc += uint64(in.Len)
	}
	return slotUse(fn, frame)
}

// frameSlotUse: with a frame pointer set up at depth frameAt (its return address slot
// at frameAt(%rbp)), the first instruction of fn that accesses frameAt(%rbp), if fn
// never writes %rbp but to set up and end that frame.
func (b *Binary) frameSlotUse(fn *elfio.Func, frameAt int64) (uint64, string) {
	if frameAt < 0 {
		return 0, ""
	}
	code := b.code(fn.Addr, fn.Size)
	var hit uint64
	for off := 0; off < len(code); {
		pc := fn.Addr + uint64(off)
		in, err := x86dec.DecodeFast(code[off:], pc)
		if err != nil || in.Len <= 0 {
			return 0, ""
		}
		xi, err := x86dec.Operands(code[off : off+in.Len])
		off += in.Len
		if err != nil {
			continue
		}
		if gprWrites(&xi)&famBit(rBP) != 0 && xi.Op != x86asm.POP && xi.Op != x86asm.LEAVE &&
			!(xi.Op == x86asm.MOV && xi.Args[0] == x86asm.RBP && xi.Args[1] == x86asm.RSP) {
			return 0, "" // %rbp is not only the frame pointer
		}
		if m, ok := accessedMem(&xi); ok && hit == 0 && m.Base == x86asm.RBP && m.Index == 0 && m.Disp == frameAt {
			hit = pc
		}
	}
	if hit == 0 {
		return 0, ""
	}
	return hit, fmt.Sprintf("the instruction at %#x accesses the return address slot %#x(%%rbp)", hit, frameAt)
}

// stackSwitch: xi sets %rsp to a value not derived from the stack pointer (onStack: the
// registers that hold one): a mov, cmov or xchg from memory or from another register,
// a lea off another register, a pop into %rsp. It returns the source as printed.
// Arithmetic on %rsp itself (and, sub of a register: alloca, alignment) is not a switch.
func stackSwitch(xi *x86asm.Inst, onStack regMask) (string, bool) {
	if xi.Args[0] != x86asm.RSP && !(xi.Op == x86asm.XCHG && xi.Args[1] == x86asm.RSP) {
		return "", false
	}
	src := xi.Args[1]
	if xi.Op == x86asm.XCHG && xi.Args[1] == x86asm.RSP {
		src = xi.Args[0]
	}
	switch xi.Op {
	case x86asm.POP:
		return "the stack's top word", true
	case x86asm.MOV, x86asm.XCHG, x86asm.CMOVA, x86asm.CMOVAE, x86asm.CMOVB, x86asm.CMOVBE, x86asm.CMOVE,
		x86asm.CMOVG, x86asm.CMOVGE, x86asm.CMOVL, x86asm.CMOVLE, x86asm.CMOVNE, x86asm.CMOVNO, x86asm.CMOVNP,
		x86asm.CMOVNS, x86asm.CMOVO, x86asm.CMOVP, x86asm.CMOVS:
		switch a := src.(type) {
		case x86asm.Mem:
			return "memory", true
		case x86asm.Reg:
			if f, _, ok := gpr(a); ok && onStack&famBit(f) == 0 {
				return "%" + strings.ToLower(a.String()), true
			}
		}
	case x86asm.LEA:
		if m, ok := src.(x86asm.Mem); ok {
			if f, _, ok := gpr(m.Base); !ok || onStack&famBit(f) == 0 {
				return "an address off %" + strings.ToLower(m.Base.String()), true
			}
		}
	}
	return "", false
}

// stackRegsAfter is onStack after xi: a register written by a mov of one that holds a
// stack address, a lea off one, or an immediate add, sub or and of itself still holds
// one; any other write ends that (%rsp stays: stackSwitch judges its writes).
func stackRegsAfter(xi *x86asm.Inst, onStack regMask) regMask {
	w := gprWrites(xi) &^ famBit(rSP)
	if w == 0 {
		return onStack
	}
	keep := regMask(0)
	if d, ok := xi.Args[0].(x86asm.Reg); ok {
		if f, width, ok := gpr(d); ok && width == 8 && w == famBit(f) {
			switch xi.Op {
			case x86asm.MOV:
				if r, ok := xi.Args[1].(x86asm.Reg); ok {
					if g, gw, ok := gpr(r); ok && gw == 8 && onStack&famBit(g) != 0 {
						keep = famBit(f)
					}
				}
			case x86asm.LEA:
				if m, ok := xi.Args[1].(x86asm.Mem); ok {
					if g, _, ok := gpr(m.Base); ok && onStack&famBit(g) != 0 {
						keep = famBit(f)
					}
				}
			case x86asm.ADD, x86asm.SUB, x86asm.AND:
				if _, ok := xi.Args[1].(x86asm.Imm); ok && onStack&famBit(f) != 0 {
					keep = famBit(f)
				}
			}
		}
	}
	return onStack&^w | keep
}

// accessedMem returns the memory operand xi reads or writes (not lea's, nop's or a
// prefetch's, which touch no memory).
func accessedMem(xi *x86asm.Inst) (x86asm.Mem, bool) {
	switch xi.Op {
	case x86asm.LEA, x86asm.NOP, x86asm.PREFETCHNTA, x86asm.PREFETCHT0, x86asm.PREFETCHT1, x86asm.PREFETCHT2, x86asm.PREFETCHW:
		return x86asm.Mem{}, false
	}
	m, _, ok := memArg(xi)
	return m, ok
}

func isSP(r x86asm.Reg) bool { return r == x86asm.RSP || r == x86asm.ESP }

// spAdjust is how many bytes an instruction that writes %rsp moves it down (sub $N,
// add $N, lea N(%rsp)); ok false for any other write, which leaves the depth unknown.
func spAdjust(xi *x86asm.Inst) (int64, bool) {
	if xi.Args[0] != x86asm.RSP {
		return 0, false
	}
	switch xi.Op {
	case x86asm.SUB, x86asm.ADD:
		imm, ok := xi.Args[1].(x86asm.Imm)
		if !ok {
			return 0, false
		}
		if xi.Op == x86asm.SUB {
			return int64(imm), true
		}
		return -int64(imm), true
	case x86asm.LEA:
		m, ok := xi.Args[1].(x86asm.Mem)
		if !ok || m.Base != x86asm.RSP || m.Index != 0 {
			return 0, false
		}
		return -m.Disp, true
	}
	return 0, false
}

// noRetprobe lists functions whose return probes the analysis cannot judge from their
// code (the kernel keeps such a list for kprobes: NOKPROBE_SYMBOL and the blacklist):
// shell patterns, matched against every function symbol at the function's address.
var noRetprobe = []struct{ pattern, why string }{
	{"_dl_runtime_resolve*", "the dynamic loader's lazy-binding entry is reached by a jmp from the PLT with two words pushed: (%rsp) is not its return address"},
	{"_dl_runtime_profile*", "the dynamic loader's profiling entry is reached by a jmp from the PLT with two words pushed: (%rsp) is not its return address"},
	{"__restore_rt", "the signal return trampoline is entered by a handler's return: (%rsp) is the signal frame"},
	{"__restore", "the signal return trampoline is entered by a handler's return: (%rsp) is the signal frame"},
	{"_Unwind_*", "libgcc's unwinder reads and rewrites its callers' return addresses (uw_init_context, __builtin_eh_return)"},
	{"uw_*", "libgcc's unwinder reads and rewrites its callers' return addresses (uw_init_context, __builtin_eh_return)"},
	{"__morestack*", "split-stack support reads its caller's frame and return address"},
	{"*setjmp", "returns twice: a longjmp returns from it again through the return address saved in the jmp_buf"},
	{"*setjmp_*", "returns twice: a longjmp returns from it again through the return address saved in the jmp_buf"},
	{"getcontext", "returns twice: setcontext returns from it again through the return address saved in the context"},
	{"__getcontext", "returns twice: setcontext returns from it again through the return address saved in the context"},
	{"swapcontext", "saves its return address in a context that setcontext returns through later"},
	{"*vfork", "returns twice on one stack: the child's return and the parent's read the same return address"},
	{"__clone*", "the child starts on a new stack and never returns through the return address the probe hooked"},
	{"clone", "the child starts on a new stack and never returns through the return address the probe hooked"},
	{"clone3", "the child starts on a new stack and never returns through the return address the probe hooked"},
}

// noRetprobeReason is why fn's return may not be probed by the do-not-probe list, or "".
func (b *Binary) noRetprobeReason(addr uint64) (string, string) {
	b.names.once.Do(func() {
		b.names.at = map[uint64][]string{}
		for _, s := range b.File.Symbols {
			if s.Type == elf.STT_FUNC && s.Shndx != 0 && s.Name != "" {
				b.names.at[s.Value] = append(b.names.at[s.Value], s.Name)
			}
		}
	})
	for _, name := range b.names.at[addr] {
		for _, e := range noRetprobe {
			if ok, _ := path.Match(e.pattern, name); ok {
				return name, e.why
			}
		}
	}
	return "", ""
}

// funcNames are the function symbols by address, for the do-not-probe list, made at
// the first return probe checked.
type funcNames struct {
	once sync.Once
	at   map[uint64][]string
}
