package objlink

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const testSrc = `
extern int ext_table[4];
static int counter;
int shared_value = 7;
static const char msg[] = "hello";
int (*fnptr)(int) = 0;
__attribute__((noinline)) static int helper(int x) { return x * 3 + counter; }
int entry(int x) {
	counter += x;
	fnptr = helper;
	return helper(x) + ext_table[x & 3] + msg[x & 3] + shared_value;
}
void *get_entry(void) { return (void *)entry; }
`

func compile(t *testing.T, src string, flags ...string) (string, []byte) {
	t.Helper()
	dir := t.TempDir()
	c := filepath.Join(dir, "t.c")
	o := filepath.Join(dir, "t.o")
	if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"-c", "-O2", "-ffreestanding", "-fno-asynchronous-unwind-tables", "-o", o, c}, flags...)
	if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	data, err := os.ReadFile(o)
	if err != nil {
		t.Fatal(err)
	}
	return o, data
}

// TestLinkMatchesLD links one object with objlink and with GNU ld at the same addresses
// and compares the bytes of every area.
func TestLinkMatchesLD(t *testing.T) {
	if _, err := exec.LookPath("ld"); err != nil {
		t.Skip("ld not installed")
	}
	for _, pic := range []string{"-fPIC", "-fPIE"} {
		t.Run(pic, func(t *testing.T) {
			objPath, data := compile(t, testSrc, pic)
			obj, err := ParseObject("t.o", data)
			if err != nil {
				t.Fatal(err)
			}
			l, err := New(obj)
			if err != nil {
				t.Fatal(err)
			}
			b := Bases{Text: 0x500000, Rodata: 0x510000, Data: 0x520000, BSS: 0x530000}
			const ext = 0x540000
			out, err := l.Link(b, func(name string) (uint64, bool) { return ext, name == "ext_table" })
			if err != nil {
				t.Fatal(err)
			}
			dir := filepath.Dir(objPath)
			script := `SECTIONS {
  . = 0x500000; .text : { *(.text .text.*) }
  . = 0x510000; .rodata : { *(.rodata .rodata.*) }
  . = 0x520000; .data : { *(.data .data.*) }
  . = 0x530000; .bss : { *(.bss .bss.*) }
  ext_table = 0x540000;
  /DISCARD/ : { *(.comment) *(.note.*) *(.eh_frame) }
}`
			lds := filepath.Join(dir, "t.ld")
			os.WriteFile(lds, []byte(script), 0o644)
			elfOut := filepath.Join(dir, "t.elf")
			if o, err := exec.Command("ld", "-pie", "--no-dynamic-linker", "-T", lds, "-e", "entry", "-o", elfOut, objPath).CombinedOutput(); err != nil {
				t.Fatalf("ld: %v\n%s", err, o)
			}
			ef, err := elf.Open(elfOut)
			if err != nil {
				t.Fatal(err)
			}
			defer ef.Close()
			for name, got := range map[string][]byte{".text": out.Text, ".rodata": out.Rodata, ".data": out.Data} {
				s := ef.Section(name)
				if s == nil {
					if len(got) != 0 {
						t.Errorf("ld made no %s but objlink has %d bytes", name, len(got))
					}
					continue
				}
				want, _ := s.Data()
				if !bytes.Equal(got, want) {
					t.Errorf("%s differs from ld:\n objlink %x\n ld      %x", name, got, want)
				}
			}
			syms, _ := ef.Symbols()
			for _, s := range syms {
				if elf.ST_BIND(s.Info) != elf.STB_GLOBAL || s.Section == elf.SHN_ABS {
					continue
				}
				a, ok := out.Addr(s.Name)
				if !ok || a != s.Value {
					t.Errorf("symbol %s: objlink %#x (%v), ld %#x", s.Name, a, ok, s.Value)
				}
			}
			if len(out.AbsSlots) != 0 {
				t.Errorf("no absolute slots expected in this object, got %x", out.AbsSlots)
			}
		})
	}
}

// TestAbsSlots checks that function pointers in initialised data are reported for
// rebasing and hold their link-time address.
func TestAbsSlots(t *testing.T) {
	_, data := compile(t, `int f(void){return 1;} int (*tab[2])(void) = {f, f};`, "-fPIC")
	obj, err := ParseObject("t.o", data)
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(obj)
	if err != nil {
		t.Fatal(err)
	}
	b := Bases{Text: 0x1000, Rodata: 0x2000, Data: 0x3000, BSS: 0x4000}
	out, err := l.Link(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	f, _ := out.Addr("f")
	tab, _ := out.Addr("tab")
	if len(out.AbsSlots) != 2 || out.AbsSlots[0] != tab || out.AbsSlots[1] != tab+8 {
		t.Fatalf("AbsSlots = %x, want [%x %x]", out.AbsSlots, tab, tab+8)
	}
	off := tab - b.Data
	if got := binary.LittleEndian.Uint64(out.Data[off:]); got != f {
		t.Errorf("slot holds %#x, want %#x", got, f)
	}
}

func TestUndefinedSymbol(t *testing.T) {
	_, data := compile(t, `extern int missing(void); int g(void){return missing();}`, "-fPIC")
	obj, err := ParseObject("handlers.o", data)
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(obj)
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.Link(Bases{Text: 0x1000, Rodata: 0x2000, Data: 0x3000, BSS: 0x4000}, nil)
	if err == nil || !strings.Contains(err.Error(), "undefined symbol missing") || !strings.Contains(err.Error(), "handlers.o") {
		t.Fatalf("err = %v, want undefined symbol missing in handlers.o", err)
	}
}

func TestDuplicateSymbol(t *testing.T) {
	_, a := compile(t, `int dup(void){return 1;}`, "-fPIC")
	_, b := compile(t, `int dup(void){return 2;}`, "-fPIC")
	oa, _ := ParseObject("a.o", a)
	ob, _ := ParseObject("b.o", b)
	if _, err := New(oa, ob); err == nil || !strings.Contains(err.Error(), "dup") {
		t.Fatalf("err = %v, want duplicate symbol error", err)
	}
}

func TestRejectsNonObjects(t *testing.T) {
	exe, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Skip(err)
	}
	for _, in := range [][]byte{nil, []byte("not elf"), exe, exe[:100]} {
		if _, err := ParseObject("x", in); err == nil {
			t.Errorf("ParseObject accepted %d bytes", len(in))
		}
	}
}

func FuzzParseObject(f *testing.F) {
	dir := f.TempDir()
	c := filepath.Join(dir, "s.c")
	o := filepath.Join(dir, "s.o")
	os.WriteFile(c, []byte(`int x = 3; int g(int a){ return a + x; } void *p = g;`), 0o644)
	if err := exec.Command("gcc", "-c", "-fPIC", "-O2", "-o", o, c).Run(); err == nil {
		if data, err := os.ReadFile(o); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte("\x7fELF\x02\x01\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		obj, err := ParseObject("fuzz.o", data)
		if err != nil {
			return
		}
		l, err := New(obj)
		if err != nil {
			return
		}
		l.Link(Bases{Text: 0x10000, Rodata: 0x20000, Data: 0x30000, BSS: 0x40000}, func(string) (uint64, bool) { return 0x50000, true })
	})
}
