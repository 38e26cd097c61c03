package elfio

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
)

// goSighup is the name of entry 1 (SIGHUP) of a Go runtime's signal table: a Go
// string's bytes in the read-only data, which the entry points at
const goSighup = "SIGHUP: terminal line hangup"

// GoSigtable returns the address of a Go program's runtime.sigtable ([65]sigTabT,
// 24 bytes an entry: flags int32, name string): by its symbol, or, in a stripped
// program, as the one table whose second entry's name is SIGHUP's (its pointer in
// the file's words, or a PIE's relocations where its linker left the word 0) and
// whose first is SIGNONE's. ok is false when there is none.
func (f *File) GoSigtable() (addr uint64, ok bool) {
	for i := range f.Symbols {
		if s := &f.Symbols[i]; s.Name == "runtime.sigtable" && s.Shndx != 0 {
			return s.Value, true
		}
	}
	name, ok := f.rodataString(goSighup)
	if !ok {
		return 0, false
	}
	rel := f.relativeRelocs()
	read := func(a uint64) uint64 {
		if v, ok := rel[a]; ok {
			return v
		}
		b, err := f.Bytes(a, 8)
		if err != nil {
			return 0
		}
		return binary.LittleEndian.Uint64(b)
	}
	cands := f.wordsEqual(name)
	for at, v := range rel {
		if v == name {
			cands = append(cands, at)
		}
	}
	found := uint64(0)
	for _, at := range cands {
		tab := at - 8 - 24 // (the name's pointer is 8 bytes into entry 1)
		if read(at+8) != uint64(len(goSighup)) || read(tab+16) != uint64(len("SIGNONE: no trap")) {
			continue
		}
		if found != 0 && found != tab {
			return 0, false // two candidates: not sure which
		}
		found = tab
	}
	return found, found != 0
}

// rodataString returns the address of s's bytes in the allocated, read-only sections
// with file contents, when they hold it once.
func (f *File) rodataString(s string) (uint64, bool) {
	var at uint64
	n := 0
	for i := range f.Sections {
		sec := &f.Sections[i]
		if sec.Type != elf.SHT_PROGBITS || sec.Flags&elf.SHF_ALLOC == 0 || sec.Flags&(elf.SHF_WRITE|elf.SHF_EXECINSTR) != 0 {
			continue
		}
		d := f.SectionData(sec)
		for off := 0; ; {
			k := bytes.Index(d[off:], []byte(s))
			if k < 0 {
				break
			}
			at, n = sec.Addr+uint64(off+k), n+1
			off += k + 1
		}
	}
	return at, n == 1
}
