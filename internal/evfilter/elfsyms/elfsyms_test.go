package elfsyms

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/internal/evfilter"
)

// TestOfMatchesFuncSymbols: the adapter and evfilter's compatibility FuncSymbols find
// the same ranges for every function of a small C program, by name and by an address
// inside.
func TestOfMatchesFuncSymbols(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler")
	}
	dir := t.TempDir()
	src, exe := filepath.Join(dir, "p.c"), filepath.Join(dir, "p")
	code := "int twice(int x) { return 2 * x; }\nint main(int argc, char **argv) { return twice(argc); }\n"
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-O1", "-o", exe, src).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	f, err := elfio.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fns := f.Functions()
	if fns == nil {
		t.Fatal("no function table")
	}
	if _, ok := fns.ByName("twice"); !ok {
		t.Fatal("twice not found")
	}
	a, b := Of(fns), evfilter.FuncSymbols(fns)
	for _, fn := range fns.List {
		lo, size, ok := a.Func(fn.Name)
		lo2, size2, ok2 := b.Func(fn.Name)
		if !ok || lo != lo2 || size != size2 || ok != ok2 || size != max(fn.Size, 1) {
			t.Fatalf("%s: Of %#x+%d %v, FuncSymbols %#x+%d %v", fn.Name, lo, size, ok, lo2, size2, ok2)
		}
		lo, size, ok = a.FuncAt(fn.Addr + fn.Size/2)
		lo2, size2, ok2 = b.FuncAt(fn.Addr + fn.Size/2)
		if lo != lo2 || size != size2 || ok != ok2 {
			t.Fatalf("%s: at %#x Of %#x+%d %v, FuncSymbols %#x+%d %v", fn.Name, fn.Addr+fn.Size/2, lo, size, ok, lo2, size2, ok2)
		}
	}
	if _, _, ok := a.Func("no such function"); ok {
		t.Fatal("found a function that is not there")
	}
	if _, _, ok := b.Func("no such function"); ok {
		t.Fatal("FuncSymbols found a function that is not there")
	}
}
