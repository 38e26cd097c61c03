package elfio

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"reflect"
	"runtime"
	"testing"

	"github.com/kprewrite/kprewrite/internal/gopclntab"
)

// TestGoFuncsSelf: the functions .gopclntab gives this test binary (a Go program that
// go test links stripped, its text base from the runtime's moduledata) start where its
// own runtime says functions start (offset by the load bias should it be a PIE), and
// functions taken by value are found by name at their addresses.
func TestGoFuncsSelf(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fns, err := f.GoFuncs()
	if err != nil || len(fns) < 1000 {
		t.Fatalf("%d functions: %v", len(fns), err)
	}
	byName := map[string]gopclntab.Func{}
	for _, fn := range fns {
		byName[fn.Name] = fn
	}
	self := runtime.FuncForPC(reflect.ValueOf(TestGoFuncsSelf).Pointer())
	bias := self.Entry() - uintptr(byName[self.Name()].Entry)
	for _, v := range []any{TestGoFuncsSelf, Open, (*File).GoFuncs, os.Executable, runtime.GC, gopclntab.Parse} {
		pc := reflect.ValueOf(v).Pointer()
		name := runtime.FuncForPC(pc).Name()
		if fn, ok := byName[name]; !ok || uintptr(fn.Entry)+bias != pc {
			t.Errorf("%s: at %#x+%#x, the runtime says %#x", name, fn.Entry, bias, pc)
		}
	}
	for _, fn := range fns {
		if rt := runtime.FuncForPC(uintptr(fn.Entry) + bias); rt == nil || rt.Entry() != uintptr(fn.Entry)+bias {
			t.Fatalf("%s at %#x (bias %#x): the runtime has no function starting there", fn.Name, fn.Entry, bias)
		}
	}
}

// goImage is a fake Go program's layout over data: .text at 0, .gopclntab at 0x100,
// the moduledata (.go.module) at 0x300 and three RELATIVE relocations at 0x3c0, one
// loaded segment at 0x400000; data is zero-padded to hold them all.
func goImage(data []byte) *File {
	const base, size = 0x400000, 0x408
	if len(data) < size {
		data = append(data, make([]byte, size-len(data))...)
	}
	sec := func(i int, name string, typ elf.SectionType, flags elf.SectionFlag, off, size uint64) Section {
		return Section{Index: i, Name: name, Type: typ, Flags: flags, Addr: base + off, Off: off, Size: size}
	}
	return &File{Path: "fuzz", Data: data, Type: elf.ET_DYN,
		Progs: []Prog{{Type: elf.PT_LOAD, Flags: elf.PF_R | elf.PF_W | elf.PF_X, Vaddr: base, Filesz: uint64(len(data)), Memsz: uint64(len(data))}},
		Sections: []Section{{}, sec(1, ".text", elf.SHT_PROGBITS, elf.SHF_ALLOC|elf.SHF_EXECINSTR, 0, 0x100),
			sec(2, ".gopclntab", elf.SHT_PROGBITS, elf.SHF_ALLOC, 0x100, 0x200),
			sec(3, ".go.module", elf.SHT_PROGBITS, elf.SHF_ALLOC|elf.SHF_WRITE, 0x300, 0xc0),
			sec(4, ".rela.dyn", elf.SHT_RELA, elf.SHF_ALLOC, 0x3c0, 0x48)}}
}

// goImageSeed is a well-formed goImage: main.a and main.b in .text, the moduledata's
// words in the file or, with relocs, only in its relocations.
func goImageSeed(relocs bool) []byte {
	le := binary.LittleEndian
	d := make([]byte, 0x408)
	pc := d[0x100:]
	le.PutUint32(pc, 0xfffffff1)
	pc[6], pc[7] = 1, 8
	le.PutUint64(pc[8:], 2)      // nfunc
	le.PutUint64(pc[8+3*8:], 72) // funcnametab
	le.PutUint64(pc[8+7*8:], 88) // functab
	copy(pc[72:], "main.a\x00main.b\x00")
	ft := pc[88:]
	le.PutUint32(ft[0:], 0)
	le.PutUint32(ft[4:], 24)
	le.PutUint32(ft[8:], 0x40)
	le.PutUint32(ft[12:], 24+44)
	le.PutUint32(ft[16:], 0x80)
	le.PutUint32(ft[24+44:], 0x40) // main.b's _func: entry, name offset 7
	le.PutUint32(ft[24+44+4:], 7)
	words := map[uint64]uint64{0: 0x400100, 1: 0x400100 + 72, 16: 0x400100 + 88, 22: 0x400000}
	i := uint64(0)
	for w, v := range words {
		if !relocs {
			le.PutUint64(d[0x300+8*w:], v)
		} else if w != 1 { // three relocations; the name table's word stays in the file
			r := d[0x3c0+24*i:]
			le.PutUint64(r, 0x400300+8*w)
			le.PutUint64(r[8:], uint64(elf.R_X86_64_RELATIVE))
			le.PutUint64(r[16:], v)
			i++
		} else {
			le.PutUint64(d[0x300+8*w:], v)
		}
	}
	return d
}

// FuzzGoFuncs: no contents of a Go program's table, moduledata and relocations make
// the reading panic; what it reads lies in .text.
func FuzzGoFuncs(f *testing.F) {
	for _, relocs := range []bool{false, true} {
		fns, err := goImage(goImageSeed(relocs)).GoFuncs()
		if err != nil || len(fns) != 2 || fns[1].Name != "main.b" || fns[1].Entry != 0x400040 || fns[1].End != 0x400080 {
			f.Fatalf("seed (relocations %v): %+v, %v", relocs, fns, err)
		}
		f.Add(goImageSeed(relocs))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		img := goImage(data)
		fns, err := img.GoFuncs()
		if err != nil && !errors.Is(err, gopclntab.ErrFormat) {
			t.Fatalf("error not gopclntab.ErrFormat: %v", err)
		}
		for _, fn := range fns {
			if fn.Entry < 0x400000 || fn.End > 0x400100 {
				t.Fatalf("%+v outside .text", fn)
			}
		}
		img.Functions()
	})
}
