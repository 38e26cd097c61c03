package tests

import (
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite"
	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// buildLibProgram builds dir/lib/libkpw.so (functions lib_add, lib_twice) and dir/prog,
// linked with it through DT_RUNPATH $ORIGIN/lib, and returns the program's path.
func buildLibProgram(t *testing.T) (dir, prog string) {
	t.Helper()
	testprog.Need(t, "gcc")
	dir = t.TempDir()
	os.Mkdir(filepath.Join(dir, "lib"), 0o755)
	lib := `
__attribute__((noinline)) int lib_add(int a, int b) { volatile int x = a; return x + b; }
__attribute__((noinline)) int lib_twice(int a) { return lib_add(a, a); }
`
	main := `
#include <stdio.h>
int lib_twice(int);
int main(void) { printf("%d\n", lib_twice(21)); return 0; }
`
	os.WriteFile(filepath.Join(dir, "lib.c"), []byte(lib), 0o644)
	os.WriteFile(filepath.Join(dir, "main.c"), []byte(main), 0o644)
	for _, args := range [][]string{
		{"-O2", "-shared", "-fPIC", "-Wl,-soname,libkpw.so", "-o", filepath.Join(dir, "lib", "libkpw.so"), filepath.Join(dir, "lib.c")},
		{"-O2", "-o", filepath.Join(dir, "prog"), filepath.Join(dir, "main.c"), "-L" + filepath.Join(dir, "lib"), "-lkpw", "-Wl,--enable-new-dtags,-rpath,$ORIGIN/lib"},
	} {
		if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
			t.Fatalf("gcc %v: %v\n%s", args, err, out)
		}
	}
	prog = filepath.Join(dir, "prog")
	if out, err := exec.Command(prog).Output(); err != nil || string(out) != "42\n" {
		t.Fatalf("the program: %q, %v", out, err)
	}
	return dir, prog
}

// symbolAndOffset returns the address and file offset of a function of the ELF file.
func symbolAndOffset(t *testing.T, path, name string) (addr, off uint64) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, _ := f.DynamicSymbols()
	for _, s := range syms {
		if s.Name == name {
			for _, p := range f.Progs {
				if p.Type == elf.PT_LOAD && s.Value >= p.Vaddr && s.Value < p.Vaddr+p.Filesz {
					return s.Value, s.Value - p.Vaddr + p.Off
				}
			}
		}
	}
	t.Fatalf("no %s in %s", name, path)
	return 0, 0
}

// TestCheckLibraryDefinitions: check analyses LIB:SYMBOL and LIB:OFFSET definitions in
// the library the loader finds for the program (its soname through DT_RUNPATH
// $ORIGIN, a system library through the cache, a path as given), one report per
// library, beside the program's own sites.
func TestCheckLibraryDefinitions(t *testing.T) {
	dir, prog := buildLibProgram(t)
	libPath := filepath.Join(dir, "lib", "libkpw.so")
	addAddr, addOff := symbolAndOffset(t, libPath, "lib_add")
	twiceAddr, _ := symbolAndOffset(t, libPath, "lib_twice")
	libc, err := exec.Command("sh", "-c", "ldd "+prog+" | awk '$1 == \"libc.so.6\" {print $3}'").Output()
	if err != nil || len(libc) == 0 {
		t.Fatalf("ldd: %v", err)
	}
	code, out, errOut := kp("check", "--json",
		"-e", "p:kpw/main main",
		"-e", "p:kpw/add libkpw.so:lib_add a=%di",
		"-e", fmt.Sprintf("p:kpw/add_off libkpw.so:%#x", addOff),
		"-e", "r:kpw/twice "+libPath+":lib_twice $retval",
		"-e", "p:kpw/malloc libc.so.6:malloc size=%di",
		prog)
	if code != 0 {
		t.Fatalf("check: exit %d: %s", code, errOut)
	}
	var r kprewrite.CheckReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Sites) != 1 || r.Sites[0].Event != "kpw/main" || len(r.Libraries) != 3 {
		t.Fatalf("own sites %+v, %d library reports", r.Sites, len(r.Libraries))
	}
	want := []struct {
		lib, path string
		addrs     []uint64
	}{
		{"libkpw.so", libPath, []uint64{addAddr, addAddr}},
		{libPath, libPath, []uint64{twiceAddr}},
		{"libc.so.6", strings.TrimSpace(string(libc)), nil},
	}
	for i, w := range want {
		lr := r.Libraries[i]
		if lr.Library != w.lib || sameFile(lr.Binary, w.path) != nil {
			t.Errorf("library %d: %s at %s, want %s at %s", i, lr.Library, lr.Binary, w.lib, w.path)
		}
		for j, a := range w.addrs {
			if j >= len(lr.Sites) || lr.Sites[j].Addr() != a || lr.Sites[j].Verdict == "refuse" {
				t.Errorf("library %s site %d: %+v, want %#x and not refused", w.lib, j, lr.Sites, a)
			}
		}
	}
	if s := r.Libraries[2].Sites; len(s) != 1 || !strings.Contains(s[0].Function, "malloc") {
		t.Errorf("libc malloc: %+v", s)
	}
	// the text report names each library and where it was found
	code, out, _ = kp("check", "--summary", "-e", "p:kpw/add libkpw.so:lib_add", prog)
	if code != 0 || !strings.HasPrefix(out, "libkpw.so ("+libPath+"): 1 probe sites") {
		t.Errorf("text report: %d\n%s", code, out)
	}
	// a library the program does not find
	code, _, errOut = kp("check", "-e", "p:kpw/x libnothere.so.9:f", prog)
	if code == 0 || !strings.Contains(errOut, "-e #1") || !strings.Contains(errOut, "libnothere.so.9") || !strings.Contains(errOut, "not found") {
		t.Errorf("missing library: exit %d: %s", code, errOut)
	}
	// a symbol the library does not have
	code, _, errOut = kp("check", "-e", "p:kpw/x libkpw.so:main", prog)
	if code == 0 || !strings.Contains(errOut, "no symbol main in "+libPath) {
		t.Errorf("missing symbol: exit %d: %s", code, errOut)
	}
}

// sameFile is nil when a and b name the same file.
func sameFile(a, b string) error {
	sa, err := os.Stat(a)
	if err != nil {
		return err
	}
	sb, err := os.Stat(b)
	if err != nil {
		return err
	}
	if !os.SameFile(sa, sb) {
		return fmt.Errorf("%s and %s differ", a, b)
	}
	return nil
}

// TestRewriteRefusesInertLibraryProbes: rewrites whose probes would never fire, or
// that cannot be made, are errors that name the reason, exit non-zero and write
// nothing (neither OUT nor OUT.libs): the dynamic loader (which runs no DT_INIT, so its
// runtime would never start), a library the program does not find, a symbol a library
// does not have, LIB:SITE definitions in a library's rewrite. Before libraries could
// be rewritten, any library and any LIB:SITE definition exited 0 with an inert output.
func TestRewriteRefusesInertLibraryProbes(t *testing.T) {
	_, prog := buildLibProgram(t)
	cases := []struct {
		name, want string
		args       []string
	}{
		{"missing library", "libnothere.so.9: not found", []string{"-e", "p:kpw/add libkpw.so:lib_add", "-e", "p:kpw/x libnothere.so.9:f", prog}},
		{"missing symbol", "no symbol nothere in", []string{"-e", "p:kpw/add libc.so.6:malloc", "-e", "p:kpw/x libkpw.so:nothere", prog}},
		{"LIB:SITE in a library", "LIB:SITE definitions name other libraries", []string{"-e", "p:kpw/x libc.so.6:malloc", filepath.Join(filepath.Dir(prog), "lib", "libkpw.so")}},
	}
	if ld, err := filepath.EvalSymlinks("/lib64/ld-linux-x86-64.so.2"); err == nil {
		cases = append(cases, struct {
			name, want string
			args       []string
		}{"ld.so", "is the dynamic loader", []string{"-e", "p:kpw/f _dl_catch_exception", ld}})
	}
	for _, c := range cases {
		out := filepath.Join(t.TempDir(), "out")
		code, _, errOut := kp(append([]string{"rewrite", "-o", out}, c.args...)...)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("%s: exit %d: %s", c.name, code, errOut)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("%s: an output was written", c.name)
		}
		if _, err := os.Stat(out + ".libs"); err == nil {
			t.Errorf("%s: a library copy was written", c.name)
		}
	}
}
