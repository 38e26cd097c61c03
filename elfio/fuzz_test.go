package elfio

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
)

// tinyCompiled returns a small static executable built by gcc without libc, or nil when
// gcc is missing: a real linker's layout (notes, .eh_frame, PT_GNU_STACK) as fuzz seed, without
// the page-aligned separate code segment (a 9 KiB input the fuzzer minimizes slowly).
func tinyCompiled(tb testing.TB) []byte {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		return nil
	}
	dir := tb.TempDir()
	src := filepath.Join(dir, "tiny.c")
	os.WriteFile(src, []byte(`void _start(void){ __asm__ volatile("mov $42,%edi; mov $60,%eax; syscall"); }`+"\n"), 0o644)
	out := filepath.Join(dir, "tiny")
	if b, err := exec.Command(gcc, "-O2", "-static", "-nostdlib", "-Wl,--build-id", "-Wl,-z,noseparate-code", "-o", out, src).CombinedOutput(); err != nil {
		tb.Logf("gcc: %v\n%s", err, b)
		return nil
	}
	b, _ := os.ReadFile(out)
	return b
}

// FuzzParse checks that Parse never panics, and that whatever it accepts can be
// analysed and rewritten without panics, giving output that parses again.
func FuzzParse(f *testing.F) {
	names := make([]string, 0, len(testVariants))
	for n := range testVariants {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		f.Add(testVariants[n].build())
	}
	if b := tinyCompiled(f); b != nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse("fuzz", data)
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error %v does not wrap ErrFormat", err)
			}
			return
		}
		fs := file.Functions()
		for _, fn := range fs.List {
			file.Bytes(fn.Addr, fn.Size)
		}
		file.ExecSections()
		file.X86Features()
		file.ClearShadowStack()
		// the dynamic section's readers and writers (shared libraries, library copies)
		file.Soname()
		file.NeededNames()
		file.IsDynamicLoader()
		file.LibraryPatches(0x1000)
		if d, err := file.EditDynamic(); err == nil {
			if p, err := file.PlanNeeded([]Needed{{Names: []string{"libc.so.6"}, Path: "$ORIGIN/x.libs/libc.so.6"}}); err == nil {
				p.Edit(d, 0x2000)
			}
			if e := file.PlanEarlyStart(); e != nil && e.Fits(d) {
				e.Table(0x3000, 0x4000)
				e.Edit(d, 0x5000)
			}
			d.Patches()
		}
		l, err := file.PlanLayout(16, 8, 8, 8)
		if err != nil {
			return
		}
		a := &Addition{
			Layout: l,
			Text:   jmpStub(l.TextAddr, file.Entry),
			Rodata: []byte("ro"),
			Data:   []byte("rw"),
			BSS:    8,
			Symbols: []NewSymbol{
				{Name: "stub", Section: SecText, Size: 5, Func: true},
				{Name: "g", Section: SecData, Size: 2, Global: true},
			},
			Entry: &l.TextAddr,
		}
		out, err := rewriteBytes(file, a)
		if err != nil {
			return
		}
		g, err := Parse("fuzz.out", out)
		if err != nil {
			t.Fatalf("rewritten output does not parse: %v", err)
		}
		if g.Section(SecText) == nil || g.Entry != l.TextAddr || len(g.Progs) != l.PhdrNum {
			t.Fatalf("rewritten output lacks the new parts")
		}
		if _, err := g.PlanLayout(16, 0, 0, 0); !errors.Is(err, ErrRewritten) {
			t.Fatalf("output not recognised as rewritten: %v", err)
		}
	})
}
