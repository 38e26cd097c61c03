package analysis

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/kprewrite/kprewrite/internal/x86dec"
	"golang.org/x/arch/x86/x86asm"
)

// Code that runs with every signal blocked cannot take an int3 probe: the SIGTRAP it
// raises is blocked, and the kernel then kills the process with it (force_sig). In a
// static program the C library's own code runs so: posix_spawn's child between its
// clone and its exec (glibc's __spawni_child, musl's child), a new thread before its
// mask is restored (start_thread), clone's child. A dynamic program has none of that
// code in the executable. Such a function gets a jump-optimized probe or none; its
// return is not probed either: posix_spawn's child shares the parent's memory and
// thread pointer, so return-probe instances it took would be the parent thread's. A
// Go program's runtime has such code too (its signal handlers, a new thread's start,
// fork and exec); a Go function's return goes at its exits, with no instance, and
// stays.

// blockedRoots are where such code starts: with walk, every function reached from the
// root through direct calls and jumps runs so too; otherwise the function alone.
// spawn: only in a program that has posix_spawn's child code.
var blockedRoots = []struct {
	name, why   string
	walk, spawn bool
}{
	{"__spawni_child", "posix_spawn's child, which runs with every signal blocked until its exec", true, true},
	{"child", "posix_spawn's child (musl), which runs with every signal blocked until its exec", true, true},
	// what posix_spawn's child calls through a pointer: its exec
	{"__execve", "the exec posix_spawn's child calls with every signal blocked", true, true},
	{"__execvpex", "the exec posix_spawnp's child calls with every signal blocked", true, true},
	{"__execvpe", "the exec posix_spawnp's child calls with every signal blocked", true, true},
	{"start_thread", "a new thread's start, which runs with every signal blocked until it restores the mask", false, false},
	{"__clone", "clone, whose child starts with the mask its parent blocked", false, false},
	{"__clone3", "clone, whose child starts with the mask its parent blocked", false, false},
	{"__clone_internal", "clone, whose child starts with the mask its parent blocked", false, false},
	{"clone3", "clone, whose child starts with the mask its parent blocked", false, false},
	// Go's runtime: its signal handlers run with every signal blocked (it sets a full
	// sa_mask), and a new thread starts with every signal blocked until minit
	{"runtime.sigtramp.abi0", "Go's signal handler, which runs with every signal blocked", true, false},
	{"runtime.cgoSigtramp.abi0", "Go's signal handler, which runs with every signal blocked", true, false},
	{"runtime.mstart.abi0", "a new Go thread's start, which runs with every signal blocked until minit", false, false},
	{"runtime.mstart0", "a new Go thread's start, which runs with every signal blocked until minit", false, false},
	{"runtime.clone.abi0", "clone, whose child starts with the mask its parent blocked", false, false},
	{"syscall.forkAndExecInChild1", "Go's fork and exec, which runs with every signal blocked (runtime_BeforeFork) in the parent until the child is made, and in the child until its exec", true, false},
}

// signalsBlocked says why function fi runs with every signal blocked, or "".
func (b *Binary) signalsBlocked(fi int) string {
	b.blocked.once.Do(b.findBlocked)
	return b.blocked.why[fi]
}

type blockedFuncs struct {
	once sync.Once
	why  map[int]string
}

// findBlocked walks from each root present (as a function of its own name; musl's
// "child" only in a program that has posix_spawn).
func (b *Binary) findBlocked() {
	b.blocked.why = map[int]string{}
	spawn := hasSpawnChild(b)
	for _, r := range blockedRoots {
		fn, ok := b.Funcs.ByName(r.name)
		if !ok || (r.spawn && !spawn) {
			continue
		}
		root, ok := b.startIndex(fn.Addr)
		if !ok {
			continue
		}
		// the function and the fragments inside its symbol (clone's child part has an
		// FDE of its own: a function start the symbol covers)
		for _, fi := range b.insideSymbol(fn.Name, fn.Addr) {
			b.blocked.why[fi] = fmt.Sprintf("%s is %s", fn.Name, r.why)
		}
		if r.walk {
			b.walkBlocked(root, fn.Name, r.why, -1)
		}
	}
	b.findBlockAll()
}

// walkBlocked marks every function reached from root through at most depth direct
// calls (depth < 0: any number) and any direct jumps as running with every signal blocked (root
// itself is marked already), up to 4096.
func (b *Binary) walkBlocked(root int, rootName, why string, depth int) {
	type item struct{ fi, depth int }
	queue := []item{{root, 0}}
	for len(queue) > 0 && len(b.blocked.why) < 4096 {
		fi, d := queue[0].fi, queue[0].depth
		queue = queue[1:]
		f := &b.Funcs.List[fi]
		// past the function's end too while the code falls through into bytes no
		// function holds: an FDE that ends early (clone3's ends before its syscall, so
		// that the child part is not unwound as the parent)
		code := b.codeFrom(f.Addr)
		for off := 0; off < len(code); {
			pc := f.Addr + uint64(off)
			if pc >= f.End() && (pc >= f.End()+64 || b.isStart(pc)) {
				break
			}
			in, err := x86dec.DecodeFast(code[off:], pc)
			if err != nil || in.Len <= 0 {
				break
			}
			off += in.Len
			if pc >= f.End() && !in.FallsThrough() {
				code = code[:off] // the last instruction of the tail
			}
			if !in.Kind.IsDirectBranch() {
				continue
			}
			next := d + 1
			if in.Kind != x86dec.KindCall {
				next = d // a jump to another start is a part of the same code (clone's child part)
			}
			to, ok := b.startIndex(in.Target)
			if !ok || (depth >= 0 && next > depth) {
				continue
			}
			if _, seen := b.blocked.why[to]; !seen {
				b.blocked.why[to] = fmt.Sprintf("%s is called from %s (%s)", b.Funcs.List[to].Name, rootName, why)
				queue = append(queue, item{to, next})
			}
		}
	}
}

// Code found by what it does, where the names above are missing (a stripped
// libc.so.6 exports pthread_create and posix_spawn but not start_thread or
// __spawni_child): a function that blocks every signal with an inline rt_sigprocmask
// (glibc's internal_signal_block_all) runs with them blocked until it sets the mask
// again, and so does every function it calls in between (create_thread,
// __clone_internal, clone). A function whose address that code takes (lea) is a new
// thread's or child's entry, clone's fn, which starts with every signal blocked and
// keeps them so until its own rt_sigprocmask(SIG_SETMASK) (start_thread) or until its
// exec (posix_spawn's child, which restores the mask by a call): what it calls before
// then runs so too. Over-marking costs a function its int3 probes (and its
// --verify-regions check), never its safety.

// blockAllDepth bounds the walk from what runs in a blocked window: the whole call
// graph below pthread_create's clone would take in every error path (getcwd, open,
// stat... through the assertion and abort code), which run with the mask blocked only
// when something already failed. Two calls deep takes in create_thread,
// __clone_internal and the clones.
const blockAllDepth = 2

// Mask system calls, by what rt_sigprocmask is asked.
const (
	maskOther    = iota
	maskBlockAll // rt_sigprocmask(SIG_BLOCK, <every signal>, ...)
	maskSet      // rt_sigprocmask(SIG_SETMASK, ...)
)

// findBlockAll marks the code that runs after an inline block-all rt_sigprocmask.
func (b *Binary) findBlockAll() {
	var entries []int // thread and child entries, by the lea that takes them
	for fi := range b.Funcs.List {
		f := &b.Funcs.List[fi]
		if !bytes.Contains(b.code(f.Addr, f.Size), []byte{0x0f, 0x05}) {
			continue
		}
		fc := b.loadFunc(fi)
		for k := range fc.insts {
			if b.maskSyscall(fc, k) != maskBlockAll {
				continue
			}
			why := fmt.Sprintf("runs while %s blocks every signal", f.Name)
			calls, leas := b.untilSetMask(fc, k+1)
			entries = append(entries, leas...)
			for _, to := range calls {
				if _, seen := b.blocked.why[to]; !seen {
					b.blocked.why[to] = fmt.Sprintf("%s is called while %s blocks every signal", b.Funcs.List[to].Name, f.Name)
					b.walkBlocked(to, b.Funcs.List[to].Name, why, blockAllDepth)
				}
			}
		}
	}
	// the entries the marked code takes the address of: clone's fn
	for fi, why := range b.blocked.why {
		if strings.Contains(why, "blocks every signal") {
			entries = append(entries, b.leaTargets(b.loadFunc(fi))...)
		}
	}
	slices.Sort(entries)
	for _, ei := range slices.Compact(entries) {
		name := b.Funcs.List[ei].Name
		if _, seen := b.blocked.why[ei]; !seen {
			b.blocked.why[ei] = fmt.Sprintf("%s is a new thread's or child's entry, whose address code that blocks every signal takes (clone's fn)", name)
		}
		calls, _ := b.untilSetMask(b.loadFunc(ei), 0)
		for _, to := range calls {
			if _, seen := b.blocked.why[to]; !seen {
				b.blocked.why[to] = fmt.Sprintf("%s is called by %s, a new thread's or child's entry, before it sets its signal mask", b.Funcs.List[to].Name, name)
				// (the callee alone: start_thread's paths that skip its mask's restore
				// are the exits of a thread that pthread_exit or a cancellation
				// longjmp'd back to, which run with the thread's own mask)
				b.walkBlocked(to, name, "a new thread's or child's entry, before it sets its signal mask", 0)
			}
		}
	}
}

// untilSetMask follows fc's code from instruction k along its direct jumps and
// fall-throughs to each rt_sigprocmask(SIG_SETMASK) or return, and returns the
// functions it calls (or jumps to) on the way and those whose address it takes.
func (b *Binary) untilSetMask(fc *fcode, k int) (calls, leas []int) {
	seen := map[int]bool{}
	queue := []int{k}
	for len(queue) > 0 && len(seen) < 1<<14 {
		i := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		if i < 0 || i >= len(fc.insts) || seen[i] {
			continue
		}
		seen[i] = true
		in := &fc.insts[i].in
		if in.Kind == x86dec.KindSyscall && b.maskSyscall(fc, i) == maskSet {
			continue
		}
		if in.RIPRel {
			if xi := fc.x(i); xi != nil && xi.Op == x86asm.LEA {
				if to, ok := b.startIndex(in.RIPTarget); ok && to != fc.idx {
					leas = append(leas, to)
				}
			}
		}
		if in.Kind.IsDirectBranch() {
			if j := fc.find(in.Target); j >= 0 && in.Kind != x86dec.KindCall {
				queue = append(queue, j) // a branch inside the function
			} else if to, ok := b.startIndex(in.Target); ok && to != fc.idx {
				calls = append(calls, to)
			}
		}
		if in.FallsThrough() && in.Kind != x86dec.KindRet {
			queue = append(queue, i+1)
		}
	}
	return calls, leas
}

// leaTargets returns the functions whose address fc takes with a RIP-relative lea.
func (b *Binary) leaTargets(fc *fcode) []int {
	var out []int
	for i := range fc.insts {
		in := &fc.insts[i].in
		if !in.RIPRel {
			continue
		}
		if xi := fc.x(i); xi != nil && xi.Op == x86asm.LEA {
			if to, ok := b.startIndex(in.RIPTarget); ok && to != fc.idx {
				out = append(out, to)
			}
		}
	}
	return out
}

// maskSyscall says what the system call at instruction k asks, when it is an inline
// rt_sigprocmask whose arguments the instructions just before it set: %eax 14, %edi
// the how, %rsi (for SIG_BLOCK) a lea of a set whose 8 bytes are all ones.
func (b *Binary) maskSyscall(fc *fcode, k int) int {
	if k >= len(fc.insts) || fc.insts[k].in.Kind != x86dec.KindSyscall {
		return maskOther
	}
	const unknown = -1
	nr, how, set := int64(unknown), int64(unknown), uint64(0)
	var done regMask // the registers whose (latest) setting was seen
	for j := k - 1; j >= 0 && j >= k-12; j-- {
		if fc.insts[j].in.Kind != x86dec.KindOther {
			break // the code before a branch or call may not lead here
		}
		xi := fc.x(j)
		if xi == nil {
			break
		}
		w := gprWrites(xi) &^ done
		if w == 0 {
			continue
		}
		done |= w
		dst, _ := xi.Args[0].(x86asm.Reg)
		fam, _, _ := gpr(dst)
		switch {
		case w&famBit(rAX) != 0 && fam == rAX && xi.Op == x86asm.MOV && isImm(xi.Args[1]):
			nr = int64(xi.Args[1].(x86asm.Imm))
		case w&famBit(rDI) != 0 && fam == rDI && xi.Op == x86asm.MOV && isImm(xi.Args[1]):
			how = int64(xi.Args[1].(x86asm.Imm))
		case w&famBit(rDI) != 0 && fam == rDI && xi.Op == x86asm.XOR && xi.Args[1] == xi.Args[0]:
			how = 0
		case w&famBit(rSI) != 0 && fam == rSI && xi.Op == x86asm.LEA && fc.insts[j].in.RIPRel:
			set = fc.insts[j].in.RIPTarget
		}
	}
	const rtSigprocmask, sigBlock, sigSetmask = 14, 0, 2
	switch {
	case nr != rtSigprocmask:
		return maskOther
	case how == sigSetmask:
		return maskSet
	case how == sigBlock && set != 0:
		if v, err := b.File.Bytes(set, 8); err == nil && bytes.Equal(v, bytes.Repeat([]byte{0xff}, 8)) {
			return maskBlockAll
		}
	}
	return maskOther
}

// hasSpawnChild: the program holds posix_spawn's child code (the exec roots count only
// then: in a program that never spawns, an exec runs with the caller's mask).
func hasSpawnChild(b *Binary) bool {
	_, glibc := b.Funcs.ByName("__spawni_child")
	_, musl := b.Funcs.ByName("posix_spawn")
	return glibc || musl
}

// insideSymbol returns the indices of the functions that start inside the symbol
// name at addr (its own first), by the symbol's size.
func (b *Binary) insideSymbol(name string, addr uint64) []int {
	end := addr + 1
	for _, s := range b.File.Symbols {
		if s.Name == name && s.Value == addr && s.Size > 0 {
			end = max(end, addr+s.Size)
		}
	}
	var out []int
	for fi := b.funcAt(addr); fi >= 0 && fi < len(b.Funcs.List) && b.Funcs.List[fi].Addr < end; fi++ {
		if b.Funcs.List[fi].Addr >= addr {
			out = append(out, fi)
		}
	}
	return out
}
