package elfio

import (
	"debug/elf"
	"encoding/binary"
	"path"
	"slices"
	"strings"
)

// relaSize is the size of an Elf64_Rela.
const relaSize = 24

// EarlyStart is a copy of an image's DT_RELA table with one more relocation: an
// R_X86_64_IRELATIVE whose "resolver" starts the image's runtime. glibc's dynamic
// loader applies a table's IRELATIVE relocations after its others, in order, and the
// DT_RELA table before the PLT's (where the IFUNC relocations of libc and most
// libraries are); placed before every other IRELATIVE one, the runtime's start-up
// runs while the image is being relocated, before any code of the image can run: its
// IFUNC resolvers, its constructors and .preinit_array, calls into it from other
// objects' start-up (a program's own malloc that the C library calls). The runtime
// still finishes its start-up (the signal guard, C handlers) at the entry point or
// DT_INIT, once everything is relocated.
type EarlyStart struct {
	head, tail []byte // the table before and after the new relocation
	newRela    bool   // the image has no DT_RELA: three new dynamic entries
}

// PlanEarlyStart returns the plan for the image, or nil when the image is not one the
// early start is made for: only glibc's loader is known to run IRELATIVE relocations
// this way (musl's refuses them), so the image must be a program whose interpreter is
// glibc's, or a library that needs glibc; its relocation table must be readable.
func (f *File) PlanEarlyStart() *EarlyStart {
	if !f.usesGlibcLoader() {
		return nil
	}
	es, _, _, err := f.dynamicEntries()
	if err != nil {
		return nil
	}
	val := func(tag elf.DynTag) (uint64, bool) {
		for _, e := range es {
			if e.tag == tag {
				return e.val, true
			}
		}
		return 0, false
	}
	e := &EarlyStart{}
	rela, haveRela := val(elf.DT_RELA)
	size, _ := val(elf.DT_RELASZ)
	if ent, ok := val(elf.DT_RELAENT); ok && ent != relaSize {
		return nil
	}
	if !haveRela {
		e.newRela = true
		return e
	}
	// a DT_RELASZ that takes in the PLT's table at its end: glibc leaves that part
	// to DT_JMPREL, and so must the copy
	if jmp, ok := val(elf.DT_JMPREL); ok {
		pltsz, _ := val(elf.DT_PLTRELSZ)
		if jmp >= rela && rela+size == jmp+pltsz {
			size -= pltsz
		}
	}
	if size%relaSize != 0 {
		return nil
	}
	old, err := f.Bytes(rela, size)
	if err != nil {
		return nil
	}
	// after the leading R_X86_64_RELATIVE ones, which DT_RELACOUNT may count
	k := 0
	for k+relaSize <= len(old) && elf.R_X86_64(binary.LittleEndian.Uint64(old[k+8:])&0xffffffff) == elf.R_X86_64_RELATIVE {
		k += relaSize
	}
	e.head, e.tail = old[:k], old[k:]
	return e
}

// usesGlibcLoader says whether the image is a dynamically linked glibc program or a
// library that needs glibc.
func (f *File) usesGlibcLoader() bool {
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b, err := f.Bytes(p.Vaddr, p.Filesz)
		if err != nil {
			return false
		}
		return strings.HasPrefix(path.Base(strings.TrimRight(string(b), "\x00")), "ld-linux-x86-64.so")
	}
	if !f.IsSharedLibrary() || f.IsDynamicLoader() {
		return false
	}
	return slices.ContainsFunc(f.NeededNames(), func(n string) bool {
		return n == "libc.so.6" || n == "ld-linux-x86-64.so.2"
	})
}

// Size is the size of the new table.
func (e *EarlyStart) Size() uint64 { return uint64(len(e.head) + relaSize + len(e.tail)) }

// NewEntries is the number of dynamic entries Edit adds.
func (e *EarlyStart) NewEntries() int {
	if e.newRela {
		return 3
	}
	return 0
}

// Table is the new table: the relocation makes the loader call resolver (a link-time
// address) and store what it returns in the word at word, which must be writable.
func (e *EarlyStart) Table(resolver, word uint64) []byte {
	b := slices.Concat(e.head, make([]byte, relaSize), e.tail)
	r := b[len(e.head):]
	binary.LittleEndian.PutUint64(r, word)
	binary.LittleEndian.PutUint64(r[8:], uint64(elf.R_X86_64_IRELATIVE))
	binary.LittleEndian.PutUint64(r[16:], resolver)
	return b
}

// Fits says whether the edit has room for the entries Edit adds.
func (e *EarlyStart) Fits(d *DynEdit) bool { return d.spare() >= e.NewEntries() }

// Edit points the image's DT_RELA at the new table at addr.
func (e *EarlyStart) Edit(d *DynEdit, addr uint64) {
	d.set(elf.DT_RELA, addr)
	d.set(elf.DT_RELASZ, e.Size())
	if e.newRela {
		d.set(elf.DT_RELAENT, relaSize)
	}
}
