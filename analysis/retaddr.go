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
func (b *Binary) returnSlotUse(fi int, entry uint64) (uint64, string) {
	fn := &b.Funcs.List[fi]
	if !b.Referenced(fn.Addr) {
		// only jumped to: a fragment of another function (a cold part with its own
		// FDE), entered with that function's frame on the stack, not a return address
		return 0, ""
	}
	depth := int64(0)    // bytes below the return address slot
	frameAt := int64(-1) // %rbp = %rsp at this depth (the slot is at depth(%rbp))
	frame := int64(-1)   // frameAt as it was set up, for frameSlotUse after the epilogue
	pc, hops := entry, 0
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
			return pc, fmt.Sprintf("%s at %#x accesses the return address slot %#x(%%rsp)", strings.ToLower(xi.Op.String()), pc, depth)
		}
		switch xi.Op {
		case x86asm.RET, x86asm.IRETQ:
			return b.frameSlotUse(fn, frame)
		case x86asm.POP, x86asm.POPFQ:
			if depth == 0 {
				return pc, fmt.Sprintf("pop at %#x takes the return address off the stack", pc)
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
			return b.frameSlotUse(fn, frame)
		case x86asm.LEAVE:
			if frameAt < 8 {
				return b.frameSlotUse(fn, frame)
			}
			depth, frameAt = frameAt-8, -1
		case x86asm.JMP:
			if !in.Kind.IsDirectBranch() || hops == 4 {
				return b.frameSlotUse(fn, frame)
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
					return b.frameSlotUse(fn, frame) // %rsp no longer known
				}
				if depth += d; depth < 0 {
					return pc, fmt.Sprintf("%s at %#x moves the stack pointer past the return address", strings.ToLower(xi.Op.String()), pc)
				}
			}
		}
		pc += uint64(in.Len)
	}
	return b.frameSlotUse(fn, frame)
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
