package analysis

import (
	"debug/elf"
	"fmt"
	"path"
	"sync"

	"github.com/kprewrite/kprewrite/internal/x86dec"
	"golang.org/x/arch/x86/x86asm"
)

// Go programs. Go's runtime moves goroutine stacks (copystack) and unwinds them
// (traceback, the garbage collector's stack scan) by the return addresses it finds: a
// return address hooked to the trampoline is no Go function's, and the runtime throws
// ("unexpected return pc") or, worse, copies the stack wrong. So a Go function's
// return is never hooked: its return events go at its exits (patch.Request.Go). Its
// entry probe goes after the stack-check prologue, because runtime.morestack restarts
// the function at its first byte once the stack has grown: a probe there would count
// the call twice.

// goInfo is what the analysis knows of a Go program, found once.
type goInfo struct {
	once     sync.Once
	is       bool
	lo, hi   uint64 // runtime.text .. runtime.etext: the Go code (0, 0: not known)
	noProbes map[uint64]string
}

// IsGo says whether the program is a Go program: it has Go's build information
// (.go.buildinfo), its build id note (.note.go.buildid) or runtime.buildVersion.
func (b *Binary) IsGo() bool {
	b.goinfo.once.Do(b.findGo)
	return b.goinfo.is
}

// IsGoCode says whether addr is Go code of a Go program (between runtime.text and
// runtime.etext when the symbols are there; the C parts of a cgo program that the
// external linker placed outside them are not). Code of a Go program without those
// symbols is all taken for Go: its return events then go at the exits, which is right
// for C too.
func (b *Binary) IsGoCode(addr uint64) bool {
	if !b.IsGo() {
		return false
	}
	g := b.goinfo
	return g.hi == 0 || addr >= g.lo && addr < g.hi
}

func (b *Binary) findGo() {
	g := b.goinfo
	f := b.File
	g.is = f.Section(".go.buildinfo") != nil || f.Section(".note.go.buildid") != nil
	for _, s := range f.Symbols {
		switch s.Name {
		case "runtime.buildVersion":
			g.is = true
		case "runtime.text":
			g.lo = s.Value
		case "runtime.etext":
			g.hi = s.Value
		}
	}
	if g.hi <= g.lo {
		g.lo, g.hi = 0, 0
	}
	if g.is {
		g.noProbes = b.goNoProbes()
	}
}

// goNoProbe lists the Go runtime's functions no probe may go in (the runtime marks
// them NOSPLIT or writes them in assembly, for the reasons given): shell patterns,
// matched against every function symbol at the function's address.
var goNoProbe = []struct{ pattern, why string }{
	{"runtime.morestack*", "runs when the goroutine's stack is used up (its caller's stack check failed): a probe's detour and handler would run below the stack guard, where the stack may have no room"},
	{"runtime.systemstack*", "switches between the goroutine's stack and the thread's g0 stack: in between, the stack pointer and g (%r14) do not match"},
	{"runtime.mcall*", "switches to the g0 stack and never returns to its caller the ordinary way (the goroutine is resumed by gogo)"},
	{"runtime.gogo*", "the scheduler's assembly that loads a goroutine's saved stack pointer and jumps into it"},
	{"runtime.gosave*", "saves the caller's stack pointer and pc for the scheduler's stack switch"},
	{"runtime.asmcgocall*", "switches to the g0 stack to call C and back: in between, the stack pointer and g do not match"},
	{"runtime.cgocallback*", "enters Go from C on the g0 stack and switches to a goroutine's stack"},
	{"runtime.goexit*", "every goroutine's first frame returns to goexit+1, which is no call's return address: a region over its first bytes would take that return"},
	{"runtime.rt0_go*", "the program's start, before g and the stacks are set up"},
	{"_rt0_amd64*", "the program's start, before g and the stacks are set up"},
	{"runtime.sigtramp*", "Go's signal entry, which runs before g is known, on the signal stack"},
	{"runtime.cgoSigtramp*", "Go's signal entry, which runs before g is known, on the signal stack"},
	{"runtime.sigreturn*", "the signal return trampoline, entered by a handler's return: (%rsp) is the signal frame"},
	{"runtime.asyncPreempt*", "entered from Go's preemption signal with the interrupted pc pushed, not by a call"},
	{"runtime.debugCall*", "a debugger's call injection, entered from a signal with its own frame rules"},
}

// goNoProbes maps the address of every function of goNoProbe to why.
func (b *Binary) goNoProbes() map[uint64]string {
	m := map[uint64]string{}
	for _, s := range b.File.Symbols {
		if s.Type != elf.STT_FUNC || s.Shndx == 0 {
			continue
		}
		for _, e := range goNoProbe {
			if ok, _ := path.Match(e.pattern, s.Name); ok {
				if _, dup := m[s.Value]; !dup {
					m[s.Value] = s.Name + " " + e.why
				}
				break
			}
		}
	}
	return m
}

// goNoProbeReason is why no probe may go in the Go function at fnAddr, or "".
func (b *Binary) goNoProbeReason(fnAddr uint64) string {
	if !b.IsGo() {
		return ""
	}
	return b.goinfo.noProbes[fnAddr]
}

// goStackCheckEnd returns the address after a Go function's stack-check prologue at
// addr (code: the function's bytes from addr), or ok false when it has none. The
// forms (cmd/internal/obj/x86 stacksplit), each ending with a jbe to the block that
// calls runtime.morestack and jumps back to the function's first byte:
//
//	cmp %rsp,16(%r14); jbe L                              small frames
//	lea -N(%rsp),%r12; cmp %r12,16(%r14); jbe L            frames up to StackBig
//	mov %rsp,%r12; sub $N,%r12; jb L; cmp %r12,16(%r14); jbe L   bigger frames
func goStackCheckEnd(code []byte, addr uint64) (uint64, bool) {
	var ins []x86asm.Inst
	pc := addr
	for off := 0; len(ins) < 5 && off < len(code); {
		in, err := x86dec.DecodeFast(code[off:], pc)
		if err != nil || in.Len <= 0 {
			return 0, false
		}
		xi, err := x86dec.Operands(code[off : off+in.Len])
		if err != nil {
			return 0, false
		}
		ins = append(ins, xi)
		off += in.Len
		pc += uint64(in.Len)
		if xi.Op == x86asm.JBE {
			break
		}
	}
	end := addr
	for _, xi := range ins {
		end += uint64(xi.Len)
	}
	switch {
	case len(ins) == 2 && isGuardCmp(ins[0], x86asm.RSP):
	case len(ins) == 3 && ins[0].Op == x86asm.LEA && ins[0].Args[0] == x86asm.R12 && isSPMem(ins[0].Args[1]) &&
		isGuardCmp(ins[1], x86asm.R12):
	case len(ins) == 5 && ins[0].Op == x86asm.MOV && ins[0].Args[0] == x86asm.R12 && ins[0].Args[1] == x86asm.RSP &&
		ins[1].Op == x86asm.SUB && ins[1].Args[0] == x86asm.R12 && ins[2].Op == x86asm.JB && isGuardCmp(ins[3], x86asm.R12):
	default:
		return 0, false
	}
	return end, ins[len(ins)-1].Op == x86asm.JBE
}

// isGuardCmp: xi is cmp reg,16(%r14), the stack pointer (or what it will be) against
// g.stackguard0.
func isGuardCmp(xi x86asm.Inst, reg x86asm.Reg) bool {
	m, ok := xi.Args[1].(x86asm.Mem)
	return xi.Op == x86asm.CMP && xi.Args[0] == reg && ok && m.Base == x86asm.R14 && m.Index == 0 && m.Disp == 16
}

func isSPMem(a x86asm.Arg) bool {
	m, ok := a.(x86asm.Mem)
	return ok && m.Base == x86asm.RSP && m.Index == 0
}

// goEntry is where an entry probe of the Go function fn goes: after its stack check
// (why says so), or at fn.Addr.
func (b *Binary) goEntry(fnAddr uint64, name string, code []byte) (uint64, string) {
	if !b.IsGoCode(fnAddr) {
		return fnAddr, ""
	}
	end, ok := goStackCheckEnd(code, fnAddr)
	if !ok {
		return fnAddr, ""
	}
	return end, fmt.Sprintf("%s starts with Go's stack check, after which runtime.morestack restarts it: the probe goes at %#x, where the arguments are still in their registers", name, end)
}
