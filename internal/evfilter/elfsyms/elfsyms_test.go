package elfsyms

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/kprewrite/kprewrite/elfio"
)

// TestOf: the adapter finds every function of a small C program by name and by an
// address inside, with its range (a function of size 0 spans one byte), and no
// function that is not there.
func TestOf(t *testing.T) {
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
	a := Of(fns)
	for _, fn := range fns.List {
		lo, size, ok := a.Func(fn.Name)
		if !ok || lo != fn.Addr || size != max(fn.Size, 1) {
			t.Fatalf("%s: Of gives %#x+%d %v, want %#x+%d", fn.Name, lo, size, ok, fn.Addr, max(fn.Size, 1))
		}
		if in, _ := fns.Containing(fn.Addr + fn.Size/2); in == nil || in.Addr != fn.Addr {
			continue // an alias or an overlapping symbol: Containing names another
		}
		lo, size, ok = a.FuncAt(fn.Addr + fn.Size/2)
		if !ok || lo != fn.Addr || size != max(fn.Size, 1) {
			t.Fatalf("%s: at %#x Of gives %#x+%d %v", fn.Name, fn.Addr+fn.Size/2, lo, size, ok)
		}
	}
	if _, _, ok := a.Func("no such function"); ok {
		t.Fatal("found a function that is not there")
	}
}
