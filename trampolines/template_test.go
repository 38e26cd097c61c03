package trampolines

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"testing"

	kprt "github.com/kprewrite/kprewrite/runtime"
)

// The detour template reader is internal: these tests stay in the package.

func TestParseTemplateGarbage(t *testing.T) {
	if _, err := parseTemplate([]byte("not an object")); err == nil {
		t.Error("garbage parsed as an object")
	}
}

// FuzzParseTemplate feeds damaged runtime objects to the template reader: it must fail
// cleanly or return offsets inside the template.
func FuzzParseTemplate(f *testing.F) {
	// a small object holding only the template (the whole runtime object is ~100 KiB,
	// which the fuzzer spent its runs minimizing), and a damaged runtime object
	small, err := templateObject(f)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(small)
	f.Add(kprt.Object[:len(kprt.Object)/2])
	f.Fuzz(func(t *testing.T, b []byte) {
		tm, err := parseTemplate(b)
		if err != nil {
			return
		}
		for _, off := range []int{tm.Gate, tm.Index, tm.Call} {
			if off < 0 || off+4 > len(tm.Code) {
				t.Fatalf("field at %d of a %d-byte template", off, len(tm.Code))
			}
		}
		if tm.Entry < 0 || tm.Entry >= len(tm.Code) {
			t.Fatalf("entry %d of %d", tm.Entry, len(tm.Code))
		}
	})
}

// templateObject writes an ELF relocatable object that holds only the runtime's detour
// template: a .text of the template's bytes and its six symbols.
func templateObject(t testing.TB) ([]byte, error) {
	tm, err := parseTemplate(kprt.Object)
	if err != nil {
		return nil, err
	}
	strtab := []byte{0}
	var syms bytes.Buffer
	binary.Write(&syms, binary.LittleEndian, elf.Sym64{})
	for _, s := range []struct {
		name string
		off  int
	}{{kprt.SymOptTemplate, 0}, {kprt.SymOptTemplateEnd, len(tm.Code)}, {symOptEntry, tm.Entry}, {symOptGate, tm.Gate},
		{symOptIndex, tm.Index}, {symOptCall, tm.Call}} {
		binary.Write(&syms, binary.LittleEndian, elf.Sym64{Name: uint32(len(strtab)), Info: byte(elf.STB_GLOBAL)<<4 | byte(elf.STT_NOTYPE),
			Shndx: 1, Value: uint64(s.off)})
		strtab = append(append(strtab, s.name...), 0)
	}
	shstr := []byte("\x00.text\x00.symtab\x00.strtab\x00.shstrtab\x00")
	var b bytes.Buffer
	b.Write(make([]byte, 64))
	place := func(data []byte) uint64 {
		for b.Len()%8 != 0 {
			b.WriteByte(0)
		}
		off := uint64(b.Len())
		b.Write(data)
		return off
	}
	textOff, symOff, strOff, shstrOff := place(tm.Code), place(syms.Bytes()), place(strtab), place(shstr)
	shdrs := []elf.Section64{{},
		{Name: 1, Type: uint32(elf.SHT_PROGBITS), Flags: uint64(elf.SHF_ALLOC | elf.SHF_EXECINSTR), Off: textOff, Size: uint64(len(tm.Code)), Addralign: 16},
		{Name: 7, Type: uint32(elf.SHT_SYMTAB), Off: symOff, Size: uint64(syms.Len()), Link: 3, Info: 1, Addralign: 8, Entsize: 24},
		{Name: 15, Type: uint32(elf.SHT_STRTAB), Off: strOff, Size: uint64(len(strtab)), Addralign: 1},
		{Name: 23, Type: uint32(elf.SHT_STRTAB), Off: shstrOff, Size: uint64(len(shstr)), Addralign: 1}}
	shoff := place(nil)
	for _, sh := range shdrs {
		binary.Write(&b, binary.LittleEndian, sh)
	}
	out := b.Bytes()
	h := elf.Header64{Type: uint16(elf.ET_REL), Machine: uint16(elf.EM_X86_64), Version: 1, Shoff: shoff, Ehsize: 64,
		Shentsize: 64, Shnum: uint16(len(shdrs)), Shstrndx: 4}
	copy(h.Ident[:], elf.ELFMAG)
	h.Ident[elf.EI_CLASS], h.Ident[elf.EI_DATA], h.Ident[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), 1
	var hb bytes.Buffer
	binary.Write(&hb, binary.LittleEndian, h)
	copy(out, hb.Bytes())
	// the small object reads as the same template
	got, err := parseTemplate(out)
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(got.Code, tm.Code) || got.Entry != tm.Entry || got.Gate != tm.Gate || got.Index != tm.Index || got.Call != tm.Call {
		t.Fatalf("small template object reads as %+v, want %+v", got, tm)
	}
	return out, nil
}
