package patch

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"sort"

	"github.com/kprewrite/kprewrite/elfio"
	kprt "github.com/kprewrite/kprewrite/runtime"
)

// The signal guard (runtime/src/rt_sigguard.c): int3 probes die with the program when it
// blocks SIGTRAP or takes it over, so the runtime wraps the libc functions that do so;
// the same for SIGSEGV and SIGBUS, which the runtime's fault-catching reads of fetch
// arguments need (kprt.HFFastRead).
// It needs the main executable's GOT words of those functions: the targets of the
// JUMP_SLOT (PLT calls) and GLOB_DAT (-fno-plt calls, address taken) relocations that
// name them in .dynsym, found here from the dynamic relocation sections.

const (
	relaSize   = 24
	dynsymSize = 24
)

// SigGuardSlots returns the signal guard of f: its GOT words of the functions in
// kprt.SigGuardFuncs (sorted by address), its PT_GNU_RELRO range and DT_PLTGOT. A
// program without them (static, or calling none) gives nil.
func SigGuardSlots(f *elfio.File) (*kprt.SigGuard, error) {
	var slots []kprt.GotSlot
	seen := map[uint64]bool{}
	for i := range f.Sections {
		rs := &f.Sections[i]
		if rs.Type != elf.SHT_RELA || rs.Flags&elf.SHF_ALLOC == 0 {
			continue
		}
		if rs.Link == 0 {
			continue // no symbol table: a stripped static program's IRELATIVE relocations
		}
		if int(rs.Link) >= len(f.Sections) {
			return nil, fmt.Errorf("%s: symbol table index %d out of range", rs.Name, rs.Link)
		}
		ss := &f.Sections[rs.Link]
		if ss.Type != elf.SHT_DYNSYM {
			continue
		}
		if int(ss.Link) <= 0 || int(ss.Link) >= len(f.Sections) {
			return nil, fmt.Errorf("%s: string table index %d out of range", ss.Name, ss.Link)
		}
		rel, syms, strs := f.SectionData(rs), f.SectionData(ss), f.SectionData(&f.Sections[ss.Link])
		if rel == nil || syms == nil || strs == nil {
			continue
		}
		le := binary.LittleEndian
		for off := 0; off+relaSize <= len(rel); off += relaSize {
			addr, info := le.Uint64(rel[off:]), le.Uint64(rel[off+8:])
			typ, si := elf.R_X86_64(info&0xffffffff), info>>32
			if typ != elf.R_X86_64_JMP_SLOT && typ != elf.R_X86_64_GLOB_DAT {
				continue
			}
			if si == 0 || si >= uint64(len(syms)/dynsymSize) {
				continue
			}
			nameOff := uint64(le.Uint32(syms[si*dynsymSize:]))
			name, ok := cstr(strs, nameOff)
			if !ok {
				return nil, fmt.Errorf("%s: relocation at %#x: symbol %d has a bad name offset %#x", rs.Name, addr, si, nameOff)
			}
			fn, ok := kprt.SigGuardFuncs[name]
			if !ok || seen[addr] {
				continue
			}
			gs := kprt.GotSlot{Slot: addr, Name: name, Func: fn}
			if typ == elf.R_X86_64_JMP_SLOT {
				// its value in the file is the PLT stub the word points at until ld.so
				// binds it lazily (the runtime tells the two apart)
				b, err := f.Bytes(addr, 8)
				if err != nil {
					return nil, fmt.Errorf("%s: GOT word of %s: %w", rs.Name, name, err)
				}
				gs.Lazy = le.Uint64(b)
			} else if _, err := f.FileOffset(addr, 8); err != nil {
				return nil, fmt.Errorf("%s: GOT word of %s: %w", rs.Name, name, err)
			}
			seen[addr] = true
			slots = append(slots, gs)
		}
	}
	if len(slots) == 0 {
		return nil, nil
	}
	sort.Slice(slots, func(i, j int) bool { return slots[i].Slot < slots[j].Slot })
	g := &kprt.SigGuard{Slots: slots}
	for _, p := range f.Progs {
		if p.Type == elf.PT_GNU_RELRO {
			g.Relro, g.RelroSize = p.Vaddr, p.Memsz
		}
	}
	dyn, err := f.Dynamic()
	if err != nil {
		return nil, err
	}
	for _, e := range dyn {
		if e.Tag == elf.DT_PLTGOT {
			g.PLTGOT = e.Val
		}
	}
	return g, nil
}

// cstr returns the NUL-terminated string at off in b.
func cstr(b []byte, off uint64) (string, bool) {
	if off >= uint64(len(b)) {
		return "", false
	}
	for i := off; i < uint64(len(b)); i++ {
		if b[i] == 0 {
			return string(b[off:i]), true
		}
	}
	return "", false
}
