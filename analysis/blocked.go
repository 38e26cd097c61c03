package analysis

import (
	"fmt"
	"sync"

	"github.com/kprewrite/kprewrite/internal/x86dec"
)

// Code that runs with every signal blocked cannot take an int3 probe: the SIGTRAP it
// raises is blocked, and the kernel then kills the process with it (force_sig). In a
// static program the C library's own code runs so: posix_spawn's child between its
// clone and its exec (glibc's __spawni_child, musl's child), a new thread before its
// mask is restored (start_thread), clone's child. A dynamic program has none of that
// code in the executable. Such a function gets a jump-optimized probe or none; its
// return is not probed either: posix_spawn's child shares the parent's memory and
// thread pointer, so return-probe instances it took would be the parent thread's.

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
		if !r.walk {
			continue
		}
		queue := []int{root}
		for len(queue) > 0 && len(b.blocked.why) < 4096 {
			fi := queue[0]
			queue = queue[1:]
			f := &b.Funcs.List[fi]
			code := b.code(f.Addr, f.Size)
			for off := 0; off < len(code); {
				in, err := x86dec.DecodeFast(code[off:], f.Addr+uint64(off))
				if err != nil || in.Len <= 0 {
					break
				}
				off += in.Len
				if !in.Kind.IsDirectBranch() {
					continue
				}
				to, ok := b.startIndex(in.Target)
				if !ok {
					continue
				}
				if _, seen := b.blocked.why[to]; !seen {
					b.blocked.why[to] = fmt.Sprintf("%s is called from %s (%s)", b.Funcs.List[to].Name, fn.Name, r.why)
					queue = append(queue, to)
				}
			}
		}
	}
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
